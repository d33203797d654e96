"""Live helpers of the publish-subscribe and streams-vs-queues labs.

- ``publish_probe_bodies``: ``lab_probe`` messages through the real outbox, with
  extra body fields (``slow_ms`` for the slow subscriber).
- ``stock_recount``: real library messages without changing the library: a
  stock-take that finds each book's shelf count as it is (``stock_correct`` to the
  same count, under the book's row lock so no loan can slip in between the read and
  the write). It publishes ``stock_corrected`` and bumps the book's version; shelf
  counts, loans and members are untouched.
- ``copies_settled``: every message relayed and none of its copies still pending.
- ``retention_in_throwaway``: the retention experiment in a child process on a
  throwaway SQLite database (see ``retention_child``), so no trim ever touches the
  installation's log.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from django.db import transaction

from config.processes import ROOT, child_environment, manage_command
from course.instruments.probes import LAB_PROBE
from course.labs.harness.base import LabError
from library.models import Book
from library.services import stock_correct
from messaging.models import Delivery, OutboxMessage, StreamConsumer
from messaging.registry import MessageType
from messaging.services import (
    deliveries_claim,
    deliveries_process,
    outbox_publish,
    relay_pending,
)
from messaging.services.streams import earliest_offset, log_trim, stream_advance

RETENTION_TIMEOUT_S = 60.0
# The throwaway child must not nudge the installation's workers: a Redis nobody
# listens on makes each nudge a logged no-op (nudge_drain catches RedisError).
NO_REDIS_URL = "redis://127.0.0.1:1/0"
RECOUNT_BOOKS = 3


def publish_probe_bodies(
    run: str, seqs: Iterable[int], **extra: int | str
) -> list[int]:
    """Write ``lab_probe`` messages for ``seqs`` in one transaction; return the ids."""
    ids: list[int] = []
    with transaction.atomic():
        for seq in seqs:
            body: dict[str, Any] = {"run": run, "seq": seq, **extra}
            message = outbox_publish(type=LAB_PROBE, key=seq, body=body)
            ids.append(message.pk)
    return ids


def recount_books() -> list[int]:
    """Return up to three book ids to recount, or say what is missing."""

    books = list(Book.objects.order_by("id").values_list("id", flat=True)[:3])
    if not books:
        raise LabError("live: the library has no books (python manage.py seed_library)")
    return books


def stock_recount(book_ids: Sequence[int], count: int) -> list[int]:
    """Publish ``count`` stock-takes that confirm the shelf counts; return the ids.

    The books are taken in turn. Each recount reads the count and writes it back in
    one transaction holding the book's row (the write lock on SQLite, whose
    transactions start IMMEDIATE here), so a concurrent loan is never overwritten.
    """

    ids: list[int] = []
    for n in range(count):
        book_id = book_ids[n % len(book_ids)]
        with transaction.atomic():
            on_shelf = (
                Book.objects.select_for_update()
                .values_list("on_shelf", flat=True)
                .get(pk=book_id)
            )
            stock_correct(book_id=book_id, on_shelf=on_shelf)
            ids.append(
                OutboxMessage.objects.filter(
                    type=MessageType.STOCK_CORRECTED, key=str(book_id)
                )
                .order_by("-id")
                .values_list("id", flat=True)
                .first()
                or 0
            )
    return ids


def copies_settled(message_ids: Sequence[int]) -> bool:
    """Return whether every message was relayed and none of its copies is pending."""
    if OutboxMessage.objects.filter(
        pk__in=message_ids, relayed_at__isnull=True
    ).exists():
        return False
    return not Delivery.objects.filter(
        message_id__in=message_ids, status=Delivery.Status.PENDING
    ).exists()


def body_bytes(body: Any) -> int:
    """Return the UTF-8 length of the body's compact JSON (as JSON.stringify writes)."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


# --- retention on a throwaway database ----------------------------------------------


def retention_in_throwaway(*, keep: int, events: int, lagging_at: int) -> Any:
    """Run ``retention_child`` in a child process on a fresh SQLite file; return it.

    The child is a real ``manage.py`` process with the real ``log_trim``, configured
    by its environment as an installation would be (MESSAGING_RETENTION_MESSAGES),
    but its DATABASE_URL names a file in a temporary folder: the trim deletes a
    prefix of that log only, never the installation's.
    """

    with tempfile.TemporaryDirectory(prefix="streams-retention-") as folder:
        out = Path(folder) / "result.json"
        env = child_environment(
            DATABASE_URL=f"sqlite:///{Path(folder) / 'throwaway.sqlite3'}",
            REDIS_URL=NO_REDIS_URL,
            MESSAGING_RETENTION_MESSAGES=str(keep),
            LOG_LEVEL="ERROR",
        )
        code = (
            "from course.labs.harness.live_streams import retention_child; "
            f"retention_child({str(out)!r}, events={events}, lagging_at={lagging_at})"
        )
        try:
            done = subprocess.run(
                manage_command("shell", "-c", code),
                cwd=ROOT,
                env=env,
                capture_output=True,
                timeout=RETENTION_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LabError(
                f"live: the retention child did not finish in {RETENTION_TIMEOUT_S:g} s"
            ) from None
        if done.returncode != 0 or not out.exists():
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            last = lines[-1] if lines else f"exit status {done.returncode}"
            raise LabError(f"live: the retention child failed: {last}")
        return json.loads(out.read_text(encoding="utf-8"))


def _process_main_lane() -> int:
    """Claim and process every due main-lane copy in this process; return how many."""

    done = 0
    while claimed := deliveries_claim(owner=f"retention:{os.getpid()}", limit=50):
        done += len(deliveries_process(claimed, owner=f"retention:{os.getpid()}"))
    return done


def retention_child(out: str, *, events: int, lagging_at: int) -> None:
    """The retention experiment; runs in a child process on a throwaway database.

    1. Migrate the empty database (it is a fresh file: there is nothing to lose).
    2. Publish ``lagging_at`` probes; relay them, process their ``lab_probe`` copies
       (queue semantics, all done) and move ``stock_projection`` on: offset
       ``lagging_at``.
    3. Publish the rest, relay and process them; the stream consumer stays behind.
    4. ``log_trim`` with the retention the environment configured; then ask the
       consumer to move on (a trimmed one refuses and stays where it is).
    """
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    consumer = "stock_projection"

    def state() -> dict[str, Any]:
        row = StreamConsumer.objects.get(name=consumer)
        return {
            "log": OutboxMessage.objects.count(),
            "starts_at": earliest_offset(),
            "offset": row.offset,
            "readable": OutboxMessage.objects.filter(id__gt=row.offset).count(),
            "state": row.state,
        }

    first = publish_probe_bodies("retention", range(1, lagging_at + 1))
    relay_pending()
    processed = _process_main_lane()
    moved = stream_advance(consumer)
    rest = publish_probe_bodies("retention", range(lagging_at + 1, events + 1))
    relay_pending()
    processed += _process_main_lane()
    before = state()
    report = log_trim()
    after = state()
    moved_after = stream_advance(consumer)
    advanced = state()
    result = {
        "keep": settings.MESSAGING_RETENTION_MESSAGES,
        "published": len(first) + len(rest),
        "first_id": first[0] if first else None,
        "copies_done": processed,
        "moved": moved,
        "moved_after": moved_after,
        "trimmed": report.trimmed,
        "held_by": report.held_by,
        "cut": report.consumers_cut,
        "before": before,
        "after": after,
        "advanced": advanced,
        "error": StreamConsumer.objects.get(name=consumer).last_error,
    }
    Path(out).write_text(json.dumps(result), encoding="utf-8")

"""What the caching labs' live parts share: the real shelf counts, their keys, cleanup.

The origin of these live parts is the ``on_shelf`` column of real ``Book`` rows. It is
read with one primary-key query and changed only through the application's own
service, ``library.services.stock_correct``, so every lab write also bumps the book's
version and the branch's stock version and leaves its outbox message, as any change
does: the site's own cached pages never keep a value the lab changed behind them.
What a live part changes it puts back when it ends, however it ends.

Entries a lab stores itself live under the ``lab`` namespace with the run's id as the
tenant (``lab:s1:g1:trun-<run>:…``), so they can never meet a page's entry, and they
are deleted at the end with their single-flight locks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Final

from django.db import connection, connections

from course.labs.harness.base import LabError
from library.cache.keys import KeySpec
from library.cache.metrics import cache_redis
from library.cache.reads import BOOK, book_detail, branch_tenant
from library.cache.singleflight import lock_key
from library.cache.store import cache_delete
from library.models import Book
from library.services import stock_correct

LAB_NAMESPACE: Final = "lab"
SHELF: Final = KeySpec(namespace=LAB_NAMESPACE, operation="shelf")


def run_tenant(run: str) -> str:
    """Return the tenant segment that keeps one run's entries to itself."""
    return f"run-{run}"


def shelf_key(run: str, book_id: int) -> str:
    """Return the run's own cache key of one book's shelf count."""
    return SHELF.key(tenant=run_tenant(run), criteria={"id": book_id})


def shelf_read(book_id: int) -> int:
    """Return the book's shelf count as the database holds it now (one query)."""
    found = Book.objects.filter(pk=book_id).values_list("on_shelf", flat=True).first()
    if found is None:
        raise LabError(f"live: book #{book_id} vanished during the run")
    return int(found)


def shelf_write(book_id: int, on_shelf: int) -> None:
    """Set the shelf count through the application's stock-correction service."""
    stock_correct(book_id=book_id, on_shelf=on_shelf)


def require_books(book_ids: list[int]) -> None:
    """Raise LabError naming the first of ``book_ids`` the database does not hold."""
    present = set(Book.objects.filter(pk__in=book_ids).values_list("pk", flat=True))
    for book_id in book_ids:
        if book_id not in present:
            raise LabError(
                f"live: the database has no book #{book_id} "
                "(manage.py seed_library creates the demo catalogue)"
            )


@contextlib.contextmanager
def shelves_restored(book_ids: list[int]) -> Iterator[dict[int, int]]:
    """Remember the books' shelf counts; put back every one that changed at exit.

    Yields the remembered counts. The put-back is a stock correction too, so it is a
    change like any other (version, outbox); a book left as it was is not touched.
    A loan issued by someone else while the lab runs would be overwritten, so run
    the live parts on a quiet library (the demo data, or a test database).
    """
    if connection.in_atomic_block:
        # stock_correct's outbox message needs a commit for the workers to see it.
        raise LabError("live: run the live part outside a database transaction")
    original = dict(Book.objects.filter(pk__in=book_ids).values_list("pk", "on_shelf"))
    try:
        yield dict(original)
    finally:
        now = dict(Book.objects.filter(pk__in=book_ids).values_list("pk", "on_shelf"))
        for book_id, on_shelf in original.items():
            if now.get(book_id, on_shelf) != on_shelf:
                shelf_write(book_id, on_shelf)


def run_keys_delete(run: str) -> int:
    """Delete every entry and single-flight lock of the run; return how many."""
    redis = cache_redis()
    tenant = f"t{run_tenant(run)}:"
    doomed = [
        key
        for pattern in (f"{LAB_NAMESPACE}:*{tenant}*", f"{lock_key(LAB_NAMESPACE)}*")
        for key in redis.scan_iter(match=pattern, count=500)
        if tenant.encode() in key
    ]
    if doomed:
        redis.delete(*doomed)
    return len(doomed)


@contextlib.contextmanager
def run_keys(run: str) -> Iterator[None]:
    """Delete the run's entries when the block ends, however it ends."""
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # cleanup must not hide the real error
            run_keys_delete(run)


class Request(threading.Thread):
    """One concurrent request: ``work`` on a thread with its own database connection.

    The error, if any, is kept and raised again by ``finish``, so a failed request
    fails the lab instead of dying silently on its thread.
    """

    def __init__(self, name: str, work: Callable[[], object]) -> None:
        super().__init__(name=name, daemon=True)
        self._work = work
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._work()
        except BaseException as error:  # handed to the lab's thread by finish()
            self.error = error
        finally:
            connections.close_all()  # this thread's own connections

    def finish(self, timeout: float = 10.0) -> object:
        """Wait for the request; return its result or raise its error."""
        self.join(timeout)
        if self.is_alive():
            raise LabError(f"live: request {self.name} did not finish in {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.result


def book_key(book_id: int) -> str:
    """Return the key ``library.cache.reads.book_detail`` uses for the book right now.

    Built the way ``book_detail`` builds it (branch, version and update time read
    from the row); ``book_key_checked`` proves the two agree before a lab relies on
    it, so a change to the application's key cannot make a lab's fix look good.
    """

    row = (
        Book.objects.filter(pk=book_id)
        .values_list("branch_id", "version", "updated_at")
        .first()
    )
    if row is None:
        raise LabError(f"live: book #{book_id} vanished during the run")
    branch_id, version, updated_at = row
    return BOOK.key(
        tenant=branch_tenant(branch_id),
        criteria={
            "id": book_id,
            "v": version,
            "u": int(updated_at.timestamp() * 1_000_000),
        },
    )


def book_key_checked(book_id: int) -> str:
    """Return ``book_key(book_id)`` once a real ``book_detail`` read stored under it.

    Leaves the entry deleted, so the next reader of the book misses.
    """

    key = book_key(book_id)
    cache_delete(key)
    book_detail(book_id=book_id)
    stored = bool(cache_redis().exists(key))
    cache_delete(key)
    if not stored:
        raise LabError(
            "live: library.cache.reads.book_detail no longer stores under the key "
            "this lab builds (course/labs/harness/live_store.py: book_key)"
        )
    return key

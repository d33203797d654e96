"""What one drain pass costs the drainer's process: statements and CPU per pass.

``python -m bench.profile_drain [--postgres] [--sizes 0,1,4,8] [--passes 30]``

In-process, no drainer or worker running: a pass is ``drain_pass`` called here, the
drainer's unit of work, so its CPU is this process's (``time.process_time``). Not a
benchmark of the system (``python -m bench outbox`` is that): a microscope on the
fixed and per-loan parts of a pass.

1. Recreate the profile's own database (PostgreSQL ``library_bench_profile``, or
   ``var/bench-profile.sqlite3``), migrate it, seed the benchmark's library
   (``bench.outbox.create_library``). The benchmarks' Redis database
   (``BENCH_REDIS_DB``, 14) is flushed; a drainer is announced there so a loan's
   nudge queues no rq job.
2. For streams off, then on (the drainer moves stream consumers at most every
   ``STREAMS_EVERY_S``, so both kinds of pass happen): round after round, for each
   K of ``--sizes`` in turn, issue K loans (``loan_issue``), then time one
   ``drain_pass``. With streams on, the messages are backdated past the stream
   grace first, so the consumer reads this pass's K messages as it would in steady
   state. Every pass must leave nothing pending.
3. Count the statements of a pass per K in separate passes
   (``CaptureQueriesContext`` forces the query log, which costs CPU), and profile
   ``--profile-passes`` passes per K under cProfile, also separately.

DEBUG is off as in the drainers (no query log while timing).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import os
import pstats
import random
import secrets
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/library_bench_profile"
SQLITE_PATH = ROOT / "var" / "bench-profile.sqlite3"
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "14"))
OWNER = "profile:1"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_drain")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(k) for k in text.split(",")],
        default=[0, 1, 4, 8],
        help="loans per pass, comma-separated (default 0,1,4,8)",
    )
    parser.add_argument("--passes", type=int, default=30, help="timed passes per K")
    parser.add_argument("--profile-passes", type=int, default=20)
    parser.add_argument("--top", type=int, default=25, help="functions shown per K")
    parser.add_argument(
        "--profile-sizes",
        type=lambda text: [int(k) for k in text.split(",")],
        default=[0, 4],
        help="the Ks whose profile is printed (default 0,4)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--statements", action="store_true", help="print each statement of K=1"
    )
    return parser.parse_args(argv)


def environment(database_url: str) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url,
        "LIBRARY_REDIS_DB": str(REDIS_DB),
        "DEBUG": "false",
        "SECRET_KEY": "profile-" + secrets.token_urlsafe(48),
        "LOG_LEVEL": "WARNING",
    }


def recreate(database_url: str) -> None:
    """Drop and create the profile's database (only a name with ``bench_profile``)."""
    if database_url.startswith("sqlite"):
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(SQLITE_PATH) + suffix).unlink(missing_ok=True)
        return
    import dj_database_url
    import psycopg

    db = dj_database_url.parse(database_url)
    name = str(db["NAME"])
    if "bench_profile" not in name:
        raise SystemExit(f"refusing to recreate {name!r}")
    with psycopg.connect(
        dbname="postgres",
        user=db.get("USER") or None,
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        autocommit=True,
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup(database_url: str) -> None:
    os.environ.update(environment(database_url))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import django_rq

    from messaging import dispatch

    redis = django_rq.get_connection("messaging")
    if int(redis.connection_pool.connection_kwargs.get("db") or 0) != REDIS_DB:
        raise SystemExit("settings chose another Redis database")
    redis.flushdb()
    # A drainer "alive" for a day: nudges push a wake-up, no rq job.
    redis.zadd(dispatch.DRAINERS_KEY, {"profile": time.time() + 86400})


def retire() -> None:
    """Take back the announcement: Redis database 11 is also a test database."""
    import django_rq

    from messaging import dispatch

    django_rq.get_connection("messaging").zrem(dispatch.DRAINERS_KEY, "profile")


class Library:
    """The seeded rows and the loans issued against them."""

    def __init__(self) -> None:
        from bench.outbox import create_library

        self.books, self.members = create_library()
        self.rand = random.Random(7)

    def issue(self, k: int) -> None:
        from library.services import loan_issue

        for _ in range(k):
            loan_issue(
                book_id=self.rand.choice(self.books),
                member_id=self.rand.choice(self.members),
            )


def backdate_unread() -> None:
    """Age the newest messages past the stream grace (outside the measurement)."""
    from messaging.models import OutboxMessage, StreamConsumer
    from messaging.services.streams import STREAM_GRACE

    offset = min(StreamConsumer.objects.values_list("offset", flat=True), default=0)
    past = datetime.datetime.now(datetime.UTC) - 2 * STREAM_GRACE
    OutboxMessage.objects.filter(id__gt=offset).update(created_at=past)


def streams_catch_up() -> None:
    from messaging.services.streams import streams_advance

    backdate_unread()
    while streams_advance():
        pass


def one_pass(streams: bool) -> Any:
    from messaging.services.drain import DrainReport, drain_pass

    report = DrainReport()
    deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    drain_pass(
        report,
        owner=OWNER,
        batch=100,
        lane="main",
        deadline=deadline,
        streams=streams,
    )
    return report


def check_drained() -> None:
    from messaging.models import Delivery, OutboxMessage

    pending = Delivery.objects.filter(status=Delivery.Status.PENDING).count()
    unrelayed = OutboxMessage.objects.filter(relayed_at__isnull=True).count()
    if pending or unrelayed:
        raise SystemExit(f"a pass left {pending} pending, {unrelayed} unrelayed")


def prepared(library: Library, k: int, streams: bool) -> None:
    library.issue(k)
    if streams:
        backdate_unread()


class Phases:
    """CPU spent in each stage of a pass, measured by wrapping the stage's function.

    The stages are the names ``drain_pass`` calls (``messaging.services.drain``);
    ``effects`` is the time inside the subscriptions' and consumers' handlers
    (inside ``process``, ``partitions`` and ``streams``), the library's own work.
    """

    STAGES = {
        "relay_pending": "relay",
        "deliveries_claim": "claim",
        "deliveries_process": "process",
        "partitions_drain": "partitions",
        "streams_advance": "streams",
    }

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.process_time() - started
                self.spent[label] = self.spent.get(label, 0.0) + spent

        return timed

    def install(self) -> None:
        from messaging import registry
        from messaging.services import drain

        for name, label in self.STAGES.items():
            setattr(drain, name, self.wrap(label, getattr(drain, name)))
        self._wrap_handlers(registry.HANDLERS, registry.GROUP_HANDLERS)
        self._wrap_handlers(registry.STREAM_HANDLERS, registry.STREAM_BATCH_HANDLERS)
        for table in (registry.AFTER_BATCH,):
            for key, function in list(table.items()):
                table[key] = self.wrap("effects", function)

    def _wrap_handlers(
        self,
        singles: dict[str, Any],
        batches: dict[str, tuple[Any, Any]],
    ) -> None:
        wrapped = {key: self.wrap("effects", f) for key, f in singles.items()}
        for key, (single, batch) in list(batches.items()):
            if singles.get(key) is single:
                batches[key] = (wrapped[key], self.wrap("effects", batch))
        singles.update(wrapped)

    def take(self) -> dict[str, float]:
        spent = {label: seconds * 1000 for label, seconds in self.spent.items()}
        self.spent.clear()
        return spent


def timed(
    library: Library, sizes: list[int], passes: int, streams: bool, phases: Phases
) -> dict[int, list[dict[str, float]]]:
    cpu: dict[int, list[dict[str, float]]] = {k: [] for k in sizes}
    for _ in range(passes):
        for k in sizes:
            prepared(library, k, streams)
            phases.take()
            started = time.process_time()
            one_pass(streams)
            spent = (time.process_time() - started) * 1000
            cpu[k].append({"total": spent, **phases.take()})
            check_drained()
    return cpu


def counted(library: Library, k: int, streams: bool) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    prepared(library, k, streams)
    with CaptureQueriesContext(connection) as queries:
        one_pass(streams)
    check_drained()
    return [q["sql"] for q in queries.captured_queries]


def kind(sql: str) -> str:
    """Return a statement's verb and table, e.g. ``UPDATE messaging_delivery``."""
    words = sql.replace('"', "").split()
    if not words:
        return "?"
    verb = words[0].upper()
    marker = {"SELECT": "FROM", "INSERT": "INTO", "DELETE": "FROM"}.get(verb)
    upper = [w.upper() for w in words]
    if verb in ("UPDATE", "WITH"):
        at = 0
    elif marker in upper:
        at = upper.index(marker)
    else:
        return verb
    return f"{verb} {words[at + 1]}" if at + 1 < len(words) else verb


def profiled(
    library: Library, k: int, streams: bool, passes: int
) -> tuple[pstats.Stats, float]:
    # CPU time, as the timed passes measure (cProfile's default is the wall clock).
    profiler = cProfile.Profile(time.process_time)
    total = 0.0
    for _ in range(passes):
        prepared(library, k, streams)
        started = time.process_time()
        profiler.enable()
        one_pass(streams)
        profiler.disable()
        total += time.process_time() - started
        check_drained()
    return pstats.Stats(profiler), total * 1000 / passes


def top_lines(stats: pstats.Stats, passes: int, n: int) -> list[str]:
    """The ``n`` functions with the most own time, then the most cumulative time."""
    rows = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in rows.values())

    def name(func: tuple[str, int, str]) -> str:
        path, line, fn = func
        path = path.replace(str(ROOT) + "/", "")
        if "site-packages/" in path:
            path = path.split("site-packages/", 1)[1]
        return f"{fn} ({path}:{line})"

    lines = [f"  own time, {total * 1000 / passes:.1f} ms per pass profiled:"]
    by_own = sorted(rows.items(), key=lambda item: -item[1][2])[:n]
    for func, (_, calls, tt, _, _) in by_own:
        lines.append(
            f"    {tt * 1000 / passes:6.2f} ms {calls / passes:7.1f}  {name(func)}"
        )
    lines.append("  cumulative, our code:")
    ours = [
        (func, row)
        for func, row in rows.items()
        if func[0].startswith(str(ROOT))
        and "/.venv/" not in func[0]
        and "profile_drain" not in func[0]
    ]
    for func, (_, calls, _, ct, _) in sorted(ours, key=lambda item: -item[1][3])[:n]:
        lines.append(
            f"    {ct * 1000 / passes:6.2f} ms {calls / passes:7.1f}  {name(func)}"
        )
    return lines


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "mean": statistics.fmean(ordered),
        "p10": ordered[len(ordered) // 10],
        "p90": ordered[min(len(ordered) - 1, len(ordered) * 9 // 10)],
    }


def run(options: argparse.Namespace) -> dict[str, Any]:
    library = Library()
    # Warm up: the first passes create the subscription, partition and consumer rows
    # and fill Python's caches.
    for k in (1, 4, 0):
        prepared(library, k, True)
        one_pass(True)
    check_drained()
    results: dict[str, Any] = {"vendor": "", "rows": []}
    from django.db import connection

    results["vendor"] = connection.vendor
    phases = Phases()
    phases.install()
    for streams in (False, True):
        streams_catch_up()
        cpu = timed(library, options.sizes, options.passes, streams, phases)
        for k in options.sizes:
            statements = counted(library, k, streams)
            labels = sorted({label for spent in cpu[k] for label in spent})
            row = {
                "k": k,
                "streams": streams,
                "statements": len(statements),
                "kinds": dict(Counter(kind(s) for s in statements)),
                "cpu_ms": summary([spent["total"] for spent in cpu[k]]),
                "phases_ms": {
                    label: statistics.median(spent.get(label, 0.0) for spent in cpu[k])
                    for label in labels
                },
            }
            if options.statements and k == 1 and not streams:
                row["sql"] = statements
            results["rows"].append(row)
    print_table(results)
    for k in options.profile_sizes:
        streams_catch_up()
        stats, per_pass = profiled(library, k, False, options.profile_passes)
        print(f"\nK={k}, streams off: cProfile, {per_pass:.1f} ms CPU per pass")
        print("\n".join(top_lines(stats, options.profile_passes, options.top)))
    return results


def print_table(results: dict[str, Any]) -> None:
    print(f"\n{results['vendor']}: per pass (CPU ms of this process)")
    stages = ["relay", "claim", "process", "partitions", "streams", "effects"]
    print(
        f"{'K':>3} {'streams':>7} {'stmts':>6} {'median':>7} {'p10':>6} {'p90':>6}  "
        + " ".join(f"{stage:>10}" for stage in stages)
        + "  (medians; effects run inside process/partitions/streams)"
    )
    for row in results["rows"]:
        cpu = row["cpu_ms"]
        print(
            f"{row['k']:>3} {'on' if row['streams'] else 'off':>7} "
            f"{row['statements']:>6} {cpu['median']:7.1f} {cpu['p10']:6.1f} "
            f"{cpu['p90']:6.1f}  "
            + " ".join(f"{row['phases_ms'].get(stage, 0.0):10.1f}" for stage in stages)
        )
    for row in results["rows"]:
        kinds = ", ".join(f"{n}x {k}" for k, n in sorted(row["kinds"].items()))
        print(f"K={row['k']} streams={row['streams']}: {kinds}")
        for sql in row.get("sql", []):
            print(f"    {sql[:300]}")


def main(argv: list[str]) -> int:
    options = parse(argv)
    url = POSTGRES_URL if options.postgres else f"sqlite:///{SQLITE_PATH}"
    recreate(url)
    setup(url)
    try:
        results = run(options)
    finally:
        retire()
    if options.json:
        options.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

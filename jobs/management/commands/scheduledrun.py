"""Run a scheduled task by hand, or a lease probe of the ``scheduled-tasks`` lab.

``scheduledrun task NAME [--slot ISO]`` — run one slot of a periodic task now in this
process, through the same lease lock as the scheduler's runs (skipped, not failed,
while another run holds it).

``scheduledrun probe --run RUN --label A [--unlocked] [--hold-ms 300]`` — one of the
live lab's two competing processes. It announces itself, waits for the lab's start
signal (so both start together however long Django took to boot), then runs a
``hold-ms`` "report" under the lease ``lab:RUN`` (or without a lock) and appends
``started A`` / ``done A`` / ``skipped A`` to the run's trace list in Redis.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from jobs.locks import lease
from jobs.scheduler import TASKS_BY_NAME, schedule_redis, scheduled_run

PROBE_PREFIX = "lab-sched:"
PROBE_KEY_TTL_S = 600
START_WAIT_S = 120


def probe_keys(run: str) -> dict[str, str]:
    """Redis keys of one live run: who is ready, the start signal, the trace."""
    base = f"{PROBE_PREFIX}{run}"
    return {"ready": f"{base}:ready", "go": f"{base}:go", "trace": f"{base}:trace"}


def probe_lease_name(run: str) -> str:
    # The run's own lease: the installation's scheduler never holds it.
    return f"lab:{run}"


class Command(BaseCommand):
    help = "Run one slot of a periodic task now, or a scheduled-tasks lab probe."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="mode", required=True)
        task = sub.add_parser("task", help="run a periodic task's slot now")
        task.add_argument("name", choices=sorted(TASKS_BY_NAME))
        task.add_argument("--slot", help="the slot, ISO 8601 (default: now)")
        probe = sub.add_parser("probe", help="a competing process of the live lab")
        probe.add_argument("--run", required=True)
        probe.add_argument("--label", required=True)
        probe.add_argument("--unlocked", action="store_true")
        probe.add_argument("--hold-ms", type=int, default=300)
        probe.add_argument("--lease-ms", type=int, default=5000)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["mode"] == "task":
            slot = timezone.now()
            if options["slot"]:
                slot = datetime.datetime.fromisoformat(options["slot"])
                if timezone.is_naive(slot):
                    slot = slot.replace(tzinfo=datetime.UTC)
            outcome = scheduled_run(name=options["name"], slot=slot)
            self.stdout.write(f"{options['name']} {slot.isoformat()}: {outcome}")
            return
        self._probe(options)

    def _probe(self, options: dict[str, Any]) -> None:
        redis = schedule_redis()
        keys = probe_keys(options["run"])
        label: str = options["label"]

        def trace(event: str) -> None:
            # RPUSH is atomic: the list holds both processes' events in Redis order.
            redis.rpush(keys["trace"], f"{event} {label}")
            redis.expire(keys["trace"], PROBE_KEY_TTL_S)

        def report() -> None:
            trace("started")
            time.sleep(options["hold_ms"] / 1000)
            trace("done")

        redis.rpush(keys["ready"], label)
        redis.expire(keys["ready"], PROBE_KEY_TTL_S)
        if redis.blpop([keys["go"]], timeout=START_WAIT_S) is None:
            raise CommandError(f"no start signal within {START_WAIT_S} s")
        if options["unlocked"]:
            report()
            return
        name = probe_lease_name(options["run"])
        with lease(redis, name, lease_ms=options["lease_ms"]) as held:
            if held is None:
                trace("skipped")
            else:
                report()

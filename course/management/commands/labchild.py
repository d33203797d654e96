"""Child processes of the course's live labs (started by ``course.labs.harness.live``).

``labchild worker QUEUE...`` — an rq worker (one forked work-horse per job, as
``rqworker`` runs) that may also serve a lab run's own queue, which settings do not
list: the live delivery-semantics lab gives each run a private queue, so no other
worker of the installation takes its jobs and its workers take no one else's.

``labchild loans --handoff H --loan MEMBER:BOOK ... --answers FILE`` — the loan
request of the rationale lab: issue each loan through ``library.services.loan_issue``,
hand its side jobs off (one per subscription a loan message reaches; ``in-memory``:
to a background thread of this process that starts them after a delay; ``outbox``:
the loan's own outbox message is the hand-off; the side jobs and the delay are
``course.labs.harness.live_loans``, which the rationale lab reads too),
write the answer (the loan id) to FILE, and right after the last answer die with
SIGKILL, as a process does that is killed by a deploy or the OOM killer.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any

import django_rq
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django_rq.utils import reset_db_connections
from rq import Queue, SimpleWorker, Worker
from rq.logutils import setup_loghandlers

from course.labs.harness.live import PRIVATE_QUEUE_PREFIX
from course.labs.harness.live_loans import SIDE_JOB_DELAY_S, loan_side_jobs
from library.services import loan_issue


class Command(BaseCommand):
    help = "Child processes of the live labs (rq worker, loan request)."
    # Started by a live lab run, whose lab worker has run the system checks: each
    # run starts several of these, and the checks (which import every URL and
    # view) would cost each one more than its own work.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="child", required=True)
        worker = sub.add_parser("worker", help="an rq worker on these queues")
        worker.add_argument("queues", nargs="+")
        worker.add_argument("--name", default=None)
        worker.add_argument("--max-idle-time", type=int, default=None)
        worker.add_argument(
            "--simple",
            action="store_true",
            help="run jobs in the worker process itself (rq's SimpleWorker, no fork)",
        )
        loans = sub.add_parser("loans", help="issue loans, then die right after")
        loans.add_argument("--handoff", choices=("in-memory", "outbox"), required=True)
        loans.add_argument(
            "--loan", action="append", required=True, help="MEMBER:BOOK (repeatable)"
        )
        loans.add_argument("--answers", required=True, help="file for the answers")
        loans.add_argument("--side-jobs-dir", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["child"] == "worker":
            self._worker(
                options["queues"],
                options["name"],
                options["max_idle_time"],
                simple=options["simple"],
            )
        else:
            self._loans(options)

    def _worker(
        self,
        names: list[str],
        worker_name: str | None,
        max_idle_time: int | None,
        *,
        simple: bool = False,
    ) -> None:
        connection = django_rq.get_connection("default")
        queues: list[Queue] = []
        for name in names:
            if name in settings.RQ_QUEUES:
                queues.append(django_rq.get_queue(name))
            elif name.startswith(PRIVATE_QUEUE_PREFIX):
                queues.append(Queue(name, connection=connection))
            else:
                raise CommandError(
                    f"queue {name!r} is neither in RQ_QUEUES nor a lab run's own "
                    f"queue ({PRIVATE_QUEUE_PREFIX}…)"
                )
        setup_loghandlers("WARNING")
        worker_class = SimpleWorker if simple else Worker
        worker = worker_class(queues, connection=connection, name=worker_name)
        # Never carry this process's connection into the forked work-horses.
        reset_db_connections()
        worker.work(logging_level="WARNING", max_idle_time=max_idle_time)

    def _loans(self, options: dict[str, Any]) -> None:
        pairs: list[tuple[int, int]] = []
        for text in options["loan"]:
            member, _, book = text.partition(":")
            try:
                pairs.append((int(member), int(book)))
            except ValueError:
                raise CommandError(f"--loan wants MEMBER:BOOK, got {text!r}") from None
        side_dir = Path(options["side_jobs_dir"])
        side_dir.mkdir(parents=True, exist_ok=True)
        in_memory = options["handoff"] == "in-memory"
        jobs: queue.Queue[tuple[int, str]] = queue.Queue()
        if in_memory:
            threading.Thread(
                target=_side_job_thread, args=(jobs, side_dir), daemon=True
            ).start()
        answers = os.open(
            options["answers"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        # The same side jobs the outbox would carry: one per subscription of a loan.
        side_jobs = loan_side_jobs()
        for member_id, book_id in pairs:
            # The loan, its shelf count and its outbox message commit together.
            loan = loan_issue(book_id=book_id, member_id=member_id)
            if in_memory:
                for job in side_jobs:
                    jobs.put((loan.pk, job))
            # The answer: durable before the next request, like a sent response.
            os.write(answers, f"{loan.pk}\n".encode())
            os.fsync(answers)
        # Right after answering: no cleanup, no flush of anything in memory.
        os.kill(os.getpid(), signal.SIGKILL)


def _side_job_thread(jobs: queue.Queue[tuple[int, str]], side_dir: Path) -> None:
    """Run side jobs from process memory, each after a delay; mark each one done."""
    while True:
        loan_id, job = jobs.get()
        time.sleep(SIDE_JOB_DELAY_S)
        (side_dir / f"{loan_id}-{job}").write_text("done\n")

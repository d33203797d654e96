"""The drill's supervisor: one process per open drill, owner of its sandbox.

``manage.py drill supervise JOB`` is started by the drill page (``course.drills
.services``) with the operator's environment, detached from the web server. It:

1. takes the drill's row (a ``JobStatus`` of kind ``drill``) under a lease it renews
   while it lives, and lowers its CPU priority to the lab workers' (``LAB_NICE``),
   which every process it starts inherits;
2. makes a sandbox (``course.sandbox``: its own database copied from the template
   with the demo library, its own Redis server; the supervisor is its owner, so the
   sandbox sweep removes it if the supervisor is killed);
3. starts the agent inside the sandbox and has it create the operator account, store
   the learner's one-time sign-in and seed the incident;
4. starts the sandbox's rq worker, drainer and scheduler, and a daphne serving the
   real site from the sandbox on a free port of 127.0.0.1, with cookies named apart
   from the site's;
5. writes the port on the row (the page then shows the learner's sign-in link), and
   watches the row: a check asked for is run by the agent and its verdict written;
   another sign-in link is stored; a stop, the idle timeout (``DRILL_IDLE_S``
   without the drill page asking after it), the longest life (``DRILL_LONGEST_S``),
   SIGTERM, or a sandbox process that died closes the drill;
6. closing kills every process of the sandbox and removes it, and finishes the row.

The row is written only by its lease holder; the web side writes only the request
fields (``checkpoint``: touched, check, pass) and ``cancel_requested_at``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from django.conf import settings
from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from config.cpu_priority import child_group_options
from config.processes import ROOT, manage_command, run_below_the_library
from course.drills.catalogue import Drill, drill_get
from course.drills.state import (
    DRILL_KIND,
    OPERATOR,
    Phase,
    Requests,
    drill_requests,
    process_start,
)
from course.sandbox import Sandbox, SandboxError, sandbox_create, sandbox_remove
from jobs.models import JobStatus
from jobs.services import jobstatus_claim, jobstatus_leases_renew

log = logging.getLogger("course.drills")

LEASE_S: Final = 30.0
RENEW_EVERY_S: Final = 5.0
TICK_S: Final = 0.3
# Deadlines for a hung process only: everything here runs niced, and a loaded host
# gives it the CPU last.
SEED_TIMEOUT_S: Final = 300.0
CHECK_TIMEOUT_S: Final = 300.0
START_TIMEOUT_S: Final = 180.0


class DrillFailed(RuntimeError):
    """The drill cannot go on; the text is for the learner."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def site_environment(sandbox: Sandbox, port: int) -> dict[str, str]:
    """The environment of the sandbox's own site, on plain HTTP at 127.0.0.1:port."""
    return sandbox.environment(
        LOG_LEVEL="WARNING",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        CSRF_TRUSTED_ORIGINS=f"http://127.0.0.1:{port},http://localhost:{port}",
        SECURE_SSL_REDIRECT="false",
        SECURE_COOKIES="false",
        SECURE_HSTS_SECONDS="0",
        LIBRARY_COOKIE_PREFIX=f"drill{port}_",
    )


class _Agent:
    """The agent process and a thread that turns its answers into a queue."""

    def __init__(self, sandbox: Sandbox, slug: str, log_to: IO[bytes]) -> None:
        self.process = subprocess.Popen(
            manage_command("drill", "agent", slug),
            cwd=ROOT,
            env=sandbox.environment(LOG_LEVEL="WARNING"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_to,
            text=True,
            **child_group_options(),
        )
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not ours: a library printed something
            if isinstance(message, dict):
                self.answers.put(message)
        self.answers.put({"error": "the drill's agent stopped"})

    def ask(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        try:
            answer = self.answers.get(timeout=timeout_s)
        except queue.Empty:
            raise DrillFailed("The drill's agent did not answer in time.") from None
        if "error" in answer:
            raise DrillFailed(str(answer["error"]))
        return answer


@dataclass
class Supervisor:
    job_id: uuid.UUID
    owner: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:drill"
    )
    stopping: threading.Event = field(default_factory=threading.Event)
    sandbox: Sandbox | None = None
    agent: _Agent | None = None
    processes: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)
    pass_digest: str = ""
    answered_check: float = 0.0
    passed_ever: bool = False

    # --- the row ------------------------------------------------------------------

    def _write(self, **fields: Any) -> bool:
        """Write the row if this supervisor still holds it; False otherwise."""
        return (
            JobStatus.objects.filter(
                pk=self.job_id,
                state=JobStatus.State.RUNNING,
                lease_owner=self.owner,
            ).update(version=F("version") + 1, **fields)
            == 1
        )

    def _result(self, **values: Any) -> dict[str, Any]:
        row = JobStatus.objects.filter(pk=self.job_id).values("result").first()
        result = dict(row["result"] or {}) if row else {}
        result.update(values)
        return result

    def _say(self, message: str, progress: float, **result: Any) -> None:
        self._write(message=message, progress=progress, result=self._result(**result))

    # --- life ---------------------------------------------------------------------

    def run(self) -> int:
        """Run the drill to its end; return the process's exit status."""
        claimed = jobstatus_claim(
            job_id=self.job_id,
            owner=self.owner,
            lease_s=LEASE_S,
            message="making the sandbox",
        )
        if claimed is None or claimed.kind != DRILL_KIND:
            log.warning("drill %s: not ours to run (gone, or taken)", self.job_id)
            return 1
        drill = drill_get(claimed.name)
        requests = drill_requests(claimed)
        self.pass_digest = requests.pass_digest
        heartbeat = threading.Thread(target=self._heartbeat, daemon=True)
        heartbeat.start()
        reason, state = "closed", JobStatus.State.DONE
        try:
            if drill is None:
                raise DrillFailed(f"There is no drill named {claimed.name!r}.")
            self._start(drill)
            reason = self._watch()
        except (DrillFailed, SandboxError) as error:
            reason, state = str(error), JobStatus.State.FAILED
        except Exception:
            log.exception("drill %s crashed", self.job_id)
            reason, state = (
                "The drill stopped on an internal error.",
                JobStatus.State.FAILED,
            )
        finally:
            self._close(reason, state)
        return 0 if state == JobStatus.State.DONE else 1

    def _heartbeat(self) -> None:
        while not self.stopping.wait(RENEW_EVERY_S):
            try:
                close_old_connections()
                jobstatus_leases_renew(
                    kind=DRILL_KIND, owner=self.owner, lease_s=LEASE_S
                )
            except Exception:
                log.exception("drill %s: lease renewal failed", self.job_id)

    def _start(self, drill: Drill) -> None:
        self.sandbox = sandbox = sandbox_create()
        self._say(
            "seeding the incident",
            10.0,
            phase=Phase.STARTING,
            sandbox=sandbox.id,
            supervisor={"pid": os.getpid(), "start": process_start(os.getpid())},
        )
        log_to = open(sandbox.directory / "drill.log", "ab")  # noqa: SIM115
        self.agent = _Agent(sandbox, drill.slug, log_to)
        self.processes["agent"] = self.agent.process
        seeded = self.agent.ask(
            {
                "do": "seed",
                "user": OPERATOR,
                "pass": self.pass_digest,
                "next": "/admin/",
            },
            SEED_TIMEOUT_S,
        )
        facts = seeded.get("facts") or {}
        self._say("starting the sandbox's site", 60.0, facts=facts)
        port = free_port()
        environment = site_environment(sandbox, port)
        # The site's own processes, as its Procfile runs them: a worker, the
        # outbox's drainer, and the scheduler (whose sweep re-nudges retries a
        # drain left for later).
        for name, command in (
            ("worker", ("rqworker", "default", "messaging", "--with-scheduler")),
            ("drainer", ("drainer",)),
            ("scheduler", ("scheduler",)),
        ):
            self.processes[name] = subprocess.Popen(
                manage_command(*command),
                cwd=ROOT,
                env=environment,
                **child_group_options(),
                stdout=log_to,
                stderr=log_to,
            )
        self.processes["site"] = subprocess.Popen(
            [
                sys.executable,
                *("-m", "daphne", "-b", "127.0.0.1", "-p", str(port)),
                "config.asgi:application",
            ],
            cwd=ROOT,
            env=environment,
            **child_group_options(),
            stdout=log_to,
            stderr=log_to,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(port):
            self._alive()
            if time.monotonic() > deadline:
                raise DrillFailed("The sandbox's site did not start in time.")
            time.sleep(0.1)
        self._say("ready", 100.0, phase=Phase.READY, port=port, signin=self.pass_digest)

    def _alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise DrillFailed(
                    f"The sandbox's {name} process stopped (status "
                    f"{process.returncode}); start the drill again."
                )

    def _watch(self) -> str:
        """Serve the learner's requests until the drill is to close; say why."""
        while not self.stopping.is_set():
            close_old_connections()
            self._alive()
            row = JobStatus.objects.filter(pk=self.job_id).first()
            if row is None or row.state != JobStatus.State.RUNNING:
                return "closed"
            if row.lease_owner != self.owner:
                raise DrillFailed("Another process took the drill over.")
            if row.cancel_requested_at is not None:
                return row.cancel_reason or "closed by the learner"
            requests = drill_requests(row)
            ended = _ended(row, requests)
            if ended:
                return ended
            self._serve(requests)
            self.stopping.wait(TICK_S)
        return "closed: the drill's supervisor was told to stop"

    def _serve(self, requests: Requests) -> None:
        assert self.agent is not None
        if requests.pass_digest and requests.pass_digest != self.pass_digest:
            self.agent.ask(
                {"do": "pass", "user": OPERATOR, "pass": requests.pass_digest},
                CHECK_TIMEOUT_S,
            )
            self.pass_digest = requests.pass_digest
            self._say("ready", 100.0, signin=self.pass_digest)
        if requests.check_at > self.answered_check:
            self._say("checking your fix", 100.0, checking=requests.check_at)
            answer = self.agent.ask({"do": "check"}, CHECK_TIMEOUT_S)
            verdict = answer["verdict"]
            self.passed_ever = self.passed_ever or bool(verdict.get("passed"))
            self.answered_check = requests.check_at
            self._say(
                "checked: passed" if verdict.get("passed") else "checked: not yet",
                100.0,
                verdict=verdict,
                check_for=requests.check_at,
                checked_at=time.time(),
                passed_ever=self.passed_ever,
                checking=None,
            )

    def _close(self, reason: str, state: JobStatus.State) -> None:
        self.stopping.set()
        close_old_connections()
        JobStatus.objects.filter(
            pk=self.job_id, lease_owner=self.owner, state=JobStatus.State.RUNNING
        ).update(
            message=reason[:200],
            result=self._result(phase=Phase.CLOSING),
            version=F("version") + 1,
        )
        if self.sandbox is not None:
            sandbox_remove(self.sandbox)
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()
        fields: dict[str, Any] = {
            "state": state,
            "message": reason[:200],
            "finished_at": timezone.now(),
            "result": self._result(phase=Phase.CLOSED, port=None),
        }
        if state == JobStatus.State.FAILED:
            fields["error"] = reason
        JobStatus.objects.filter(pk=self.job_id, lease_owner=self.owner).exclude(
            state__in=JobStatus.FINISHED
        ).update(version=F("version") + 1, **fields)
        log.info("drill %s closed: %s", self.job_id, reason)


def _ended(row: JobStatus, requests: Requests) -> str:
    """Why the drill must close now ("" while it may go on)."""
    now = time.time()
    if now - requests.touched_at > settings.DRILL_IDLE_S:
        minutes = settings.DRILL_IDLE_S // 60
        return f"closed after {minutes} minutes without the drill's page open"
    started = row.started_at.timestamp() if row.started_at else now
    if now - started > settings.DRILL_LONGEST_S:
        return f"closed: a drill lasts at most {settings.DRILL_LONGEST_S // 60} minutes"
    return ""


@contextmanager
def _signals_stop(supervisor: Supervisor) -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        supervisor.stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def supervise(job_id: uuid.UUID) -> int:
    """Run one drill in this process (the ``drill supervise`` command)."""
    run_below_the_library()
    supervisor = Supervisor(job_id)
    with _signals_stop(supervisor):
        return supervisor.run()


def log_path(job_id: uuid.UUID) -> Path:
    return Path(settings.VAR_DIR) / "drills" / f"{job_id}.log"

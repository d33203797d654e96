"""A live run's sandbox (course.sandbox): made, used, removed, swept after a crash."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import override_settings

import course.sandbox
from config.redis_server import with_db
from course.labs.harness.base import LabError
from course.labs.harness.live import LIVE_PREFIX
from course.labs.registry import lab_get
from course.sandbox import (
    _CLAIM,
    LEASE_KEY,
    MARKER_KEY,
    SANDBOX_ENV,
    Sandbox,
    lab_run_sandboxed,
    live_in_sandbox,
    sandbox_create,
    sandbox_open,
    sandbox_pids,
    sandbox_remove,
    sandbox_sweep,
)
from library.models import Branch
from tests.processes import ROOT, child_env, wait_until
from tests.snapshots import operator_snapshot

# Sandboxes (a database, a Redis database, child processes) are made differently
# on each database: a file copied on SQLite, a template on PostgreSQL.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.each_database,
]


def slot(db: int) -> redis.Redis:
    return redis.Redis.from_url(with_db(settings.REDIS_URL, db))


def redis_left(db: int, sandbox_id: str) -> bool:
    """Whether the sandbox's Redis database still holds its data.

    Another run (a second suite on this machine) may claim the database as soon as
    it is released, so the test asks about this sandbox's marker, not emptiness.
    """
    return slot(db).get(MARKER_KEY) == sandbox_id.encode()


def database_exists(sandbox: Sandbox) -> bool:
    if connection.vendor == "sqlite":
        try:
            uri = f"file:{sandbox.database_name}?mode=ro"
            with sqlite3.connect(uri, uri=True) as db:
                applied = db.execute("SELECT count(*) FROM django_migrations")
                return bool(applied.fetchone()[0])
        except sqlite3.OperationalError:
            return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [sandbox.database_name]
        )
        return cursor.fetchone() is not None


def test_a_sandbox_has_its_own_migrated_database_and_redis(redis_client):
    operator_keys = set(redis_client.keys())
    with sandbox_open() as sandbox:
        assert database_exists(sandbox)
        assert "lab" in sandbox.database_name
        assert sandbox.database_name != connection.settings_dict["NAME"]
        assert sandbox.redis_db in settings.LAB_SANDBOX_REDIS_DBS
        assert slot(sandbox.redis_db).get(MARKER_KEY) == sandbox.id.encode()
        environment = sandbox.environment()
        assert environment["DATABASE_URL"] == sandbox.database_url
        assert environment["LIBRARY_REDIS_DB"] == str(sandbox.redis_db)
        assert environment[SANDBOX_ENV] == sandbox.id
        directory = sandbox.directory
    assert not database_exists(sandbox)
    assert not redis_left(sandbox.redis_db, sandbox.id)
    assert not directory.exists()
    assert set(redis_client.keys()) == operator_keys  # the operator's Redis untouched


def test_two_sandboxes_at_once_take_different_redis_databases():
    first, second = sandbox_create(), sandbox_create()
    try:
        assert first.redis_db != second.redis_db
        assert first.database_name != second.database_name
    finally:
        sandbox_remove(first)
        sandbox_remove(second)


def test_removal_kills_every_marked_process_even_in_another_session():
    sandbox = sandbox_create()
    try:
        sleeper = subprocess.Popen(
            ["sleep", "300"], env=sandbox.environment(), start_new_session=True
        )
        # Right after exec the new environment may not read back yet: poll for it.
        wait_until(lambda: sandbox_pids(sandbox.id) == [sleeper.pid], "the mark")
    finally:
        sandbox_remove(sandbox)
    assert sleeper.wait(timeout=10) == -9
    assert sandbox_pids(sandbox.id) == []


CRASHING_OWNER = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    import django
    django.setup()
    from course.sandbox import sandbox_create
    sandbox = sandbox_create()
    subprocess.Popen(
        ["sleep", "300"], env=sandbox.environment(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print(sandbox.id, sandbox.redis_db, sandbox.database_name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_the_sweep_removes_what_a_killed_owner_left():
    owner = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert owner.returncode == -9, owner.stderr.decode()
    sandbox_id, redis_db, database_name = owner.stdout.decode().split()
    left = settings.VAR_DIR / "labs" / sandbox_id
    record = json.loads((left / "sandbox.json").read_text())
    sandbox = Sandbox(
        sandbox_id, left, record["database_url"], database_name, int(redis_db)
    )
    assert database_exists(sandbox)
    assert sandbox_pids(sandbox_id)

    assert sandbox_id in sandbox_sweep()

    assert sandbox_pids(sandbox_id) == []
    assert not database_exists(sandbox)
    assert not left.exists()
    assert not redis_left(int(redis_db), sandbox_id)


def test_the_sweep_leaves_a_live_owners_sandbox():
    with sandbox_open() as sandbox:
        assert sandbox.id not in sandbox_sweep()
        assert database_exists(sandbox)


def test_a_redis_database_is_claimed_only_if_empty_or_stale(redis_client):
    # The claim script run against this test's own database (no one else's).
    def claim(sandbox_id: str) -> int:
        return int(redis_client.eval(_CLAIM, 2, MARKER_KEY, LEASE_KEY, sandbox_id, 60))

    redis_client.set("someone:else", "data")
    assert claim("a") == 0  # another program's data: never claimed, never flushed
    assert redis_client.get("someone:else") == b"data"
    redis_client.delete("someone:else")
    assert claim("a") == 1
    assert claim("b") == 0  # a's lease is alive
    redis_client.delete(LEASE_KEY)  # a's owner died; its lease ran out
    redis_client.set("left:by:a", "x")
    assert claim("b") == 1
    assert redis_client.get(MARKER_KEY) == b"b"
    assert redis_client.get("left:by:a") is None


def test_a_live_run_leaves_the_operators_system_exactly_as_it_was(
    redis_client, monkeypatch
):
    Branch.objects.create(id=1, name="Operator's own", city="Izmir")
    redis_client.set("operator:key", "kept")
    made: list[Sandbox] = []
    create = course.sandbox.sandbox_create

    def create_and_keep(on_wait: Callable[[], None]) -> Sandbox:
        made.append(create(on_wait))
        return made[-1]

    monkeypatch.setattr(course.sandbox, "sandbox_create", create_and_keep)
    steps: list[str] = []
    before = operator_snapshot(redis_client)

    lab = lab_get("message-queues")
    result = lab_run_sandboxed(
        lab, lab.resolve({}), live=True, progress=lambda f, label: steps.append(label)
    )

    assert operator_snapshot(redis_client) == before
    # The live part really ran (its tables are the real system's, in the sandbox).
    assert result["tables"]["live_deliveries"]["rows"]
    assert any(step.startswith(LIVE_PREFIX) for step in steps)
    assert steps[-1] == "done"
    (sandbox,) = made
    assert sandbox_pids(sandbox.id) == []
    assert not sandbox.directory.exists()
    assert not database_exists(sandbox)
    assert not redis_left(sandbox.redis_db, sandbox.id)


def test_the_live_parts_refusal_comes_back_as_its_one_line():
    # The child answers with the error line; the run raises it for the learner.
    with pytest.raises(LabError, match="no-such-lab"):
        live_in_sandbox("no-such-lab", {}, progress=lambda f, label: None)


def test_labsandbox_refuses_to_run_outside_a_sandbox():
    done = subprocess.run(
        [sys.executable, "manage.py", "labsandbox", "message-queues", "--params", "{}"],
        cwd=ROOT,
        env={k: v for k, v in child_env().items() if k != SANDBOX_ENV},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert b"only inside a sandbox" in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_live_run_killed_midway_leaves_nothing_after_the_sweep():
    # The owner (here the lab command; on the site the rq work-horse) dies by SIGKILL
    # while its live part runs: no finally runs, so the sweep must find it all.
    owner = subprocess.Popen(
        [sys.executable, "manage.py", "lab", "message-queues", "--live", "--json"],
        cwd=ROOT,
        env=child_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def running_sandbox() -> Sandbox | None:
            for manifest in (settings.VAR_DIR / "labs").glob("*/sandbox.json"):
                with contextlib.suppress(OSError, ValueError):
                    record = json.loads(manifest.read_text())
                    if (
                        record["owner_pid"] == owner.pid
                        and len(sandbox_pids(record["id"])) >= 2
                    ):  # labsandbox and the workers it started
                        return Sandbox(
                            record["id"],
                            manifest.parent,
                            record["database_url"],
                            record["database_name"],
                            record["redis_db"],
                        )
            return None

        sandbox = wait_until(running_sandbox, "the live part's processes")
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()

    assert sandbox_pids(sandbox.id)  # orphans, still working in the sandbox
    assert sandbox.id in sandbox_sweep()
    assert sandbox_pids(sandbox.id) == []
    assert not sandbox.directory.exists()
    assert not database_exists(sandbox)
    assert not redis_left(sandbox.redis_db, sandbox.id)


def test_with_every_sandbox_database_taken_a_run_waits_then_says_why(monkeypatch):
    monkeypatch.setattr(course.sandbox, "SLOT_WAIT_S", 0.0)
    steps: list[str] = []
    with (
        override_settings(LAB_SANDBOX_REDIS_DBS=[]),
        pytest.raises(LabError, match="stayed in use"),
    ):
        live_in_sandbox("message-queues", {}, lambda f, label: steps.append(label))
    assert steps == [f"{LIVE_PREFIX}waiting for a free sandbox"]

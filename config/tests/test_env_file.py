"""The development .env: written once by `make run`, read by every process by hand.

Process-level behaviour is checked in fresh interpreters, as a worker or daphne
started in a second terminal would run. Each points LIBRARY_ENV_FILE at its own file,
so a developer's real .env is neither read nor touched.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values
from honcho.environ import parse as honcho_parse

from config.env import (
    env_file_create,
    env_file_load,
    env_file_path,
    env_file_redis,
    env_file_render,
)
from config.redis_server import embedded_socket_path, local_redis_answers, stop_embedded

ROOT = Path(__file__).resolve().parents[2]
# Set by the test run or a developer's shell; each case states what it needs instead.
# manage.py and Python children, started with the environment each test gives.
pytestmark = pytest.mark.processes

CLEARED = {
    "DEBUG",
    "SECRET_KEY",
    "TIME_ZONE",
    "REDIS_URL",
    "LIBRARY_REDIS",
    "LIBRARY_ENV_FILE",
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "LIBRARY_CHANNEL_LAYER",
}
SHOW_SETTINGS = (
    "import json, os; from django.conf import settings; print(json.dumps({"
    "'debug': settings.DEBUG, 'secret': settings.SECRET_KEY, "
    "'time_zone': settings.TIME_ZONE, 'redis_url': settings.REDIS_URL, "
    "'redis_source': settings.REDIS_CHOICE.source, "
    "'database': settings.DATABASES['default']['NAME'], "
    "'channels': settings.CHANNEL_LAYERS['default']['BACKEND'], "
    "'env_file': os.environ.get('LIBRARY_ENV_FILE')}))"
)
SECRET = "s" * 60


def fresh_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(LIBRARY_VAR_DIR=str(tmp_path), LIBRARY_REDIS_DB="15", **extra)
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def shown_settings(env: dict[str, str]) -> dict[str, object]:
    result = manage("shell", "-c", SHOW_SETTINGS, env=env)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_manage_py_reads_debug_and_secret_key_from_the_env_file(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        f"DEBUG=true\nSECRET_KEY={SECRET}\nREDIS_URL=redis://127.0.0.1:6379/0\n"
    )
    shown = shown_settings(fresh_env(tmp_path, LIBRARY_ENV_FILE=str(env_file)))
    assert shown["debug"] is True
    assert shown["secret"] == SECRET


def test_variables_already_set_win_over_the_env_file(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(f"DEBUG=true\nSECRET_KEY={SECRET}\n")
    env = {"DEBUG": "false"}
    assert env_file_load(env_file, env=env) == env_file
    assert env == {"DEBUG": "false", "SECRET_KEY": SECRET}


def test_production_without_secret_key_still_refuses_to_start(tmp_path):
    """DEBUG off in the environment; the checkout's .env says DEBUG on, no key."""
    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=true\nREDIS_URL=redis://127.0.0.1:6379/0\n")
    env = fresh_env(tmp_path, DEBUG="false", LIBRARY_ENV_FILE=str(env_file))
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY must be set" in result.stderr.splitlines()[-1]


def test_time_zone_defaults_to_utc(tmp_path):
    env = fresh_env(
        tmp_path,
        DEBUG="true",
        LIBRARY_ENV_FILE="",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert shown_settings(env)["time_zone"] == "UTC"


def test_recorded_redis_url_is_used_by_a_process_started_by_hand(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=true\nREDIS_URL=redis://recorded.invalid:6380/0\n")
    shown = shown_settings(fresh_env(tmp_path, LIBRARY_ENV_FILE=str(env_file)))
    assert shown["redis_url"] == "redis://recorded.invalid:6380/15"
    assert shown["redis_source"] == "env"


@pytest.mark.embedded_redis
@pytest.mark.each_database  # the embedded-Redis pass runs on SQLite
def test_recorded_embedded_redis_is_kept_even_when_a_local_redis_answers(tmp_path):
    """The case of the issue: `make run` chose the embedded server; a worker started
    later must not attach to a Redis that has since appeared on 127.0.0.1:6379."""
    env_file = tmp_path / ".env"
    assert env_file_create(
        env_file, ROOT / ".env.example", env={"LIBRARY_REDIS": "embedded"}
    )
    try:
        shown = shown_settings(fresh_env(tmp_path, LIBRARY_ENV_FILE=str(env_file)))
    finally:
        stop_embedded(tmp_path / "redis")
    assert shown["redis_source"] == "embedded"
    assert shown["redis_url"] == (
        f"unix://{embedded_socket_path(tmp_path / 'redis')}?db=15"
    )


def test_a_test_run_reads_no_env_file_and_its_children_neither(tmp_path):
    """A developer's .env cannot point the suite at their Redis, database or layer."""
    env_file = tmp_path / ".env"
    env_file.write_text(
        "REDIS_URL=redis://devbox.invalid:6379/0\nLIBRARY_REDIS_DB=0\n"
        "DATABASE_URL=postgres://dev@devbox.invalid/library\n"
        "LIBRARY_CHANNEL_LAYER=memory\nSECRET_KEY=from-the-developers-env-file\n"
    )
    env = fresh_env(
        tmp_path,
        DJANGO_SETTINGS_MODULE="config.settings_test",
        LIBRARY_ENV_FILE=str(env_file),
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    env.pop("LIBRARY_REDIS_DB")
    code = f"import django; django.setup(); {SHOW_SETTINGS}"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    # The suite's own database (15, or this xdist worker's), never the file's 0.
    ours = os.environ["LIBRARY_REDIS_DB"]
    assert ours != "0"
    assert shown["redis_url"] == f"redis://127.0.0.1:6379/{ours}"
    assert "devbox" not in str(shown["database"])
    assert shown["channels"] == "channels_redis.core.RedisChannelLayer"
    assert shown["secret"] != "from-the-developers-env-file"
    # Inherited by the processes the tests start
    # (config.processes.child_environment).
    assert shown["env_file"] == ""
    # This very run has turned it off too.
    assert os.environ["LIBRARY_ENV_FILE"] == ""


def test_env_file_path_defaults_and_can_be_turned_off():
    default = ROOT / ".env"
    assert env_file_path(default, env={}) == default
    assert env_file_path(default, env={"LIBRARY_ENV_FILE": "/x/dev.env"}) == Path(
        "/x/dev.env"
    )
    assert env_file_path(default, env={"LIBRARY_ENV_FILE": ""}) is None


def test_make_runs_writer_fills_in_a_secret_and_the_chosen_redis_once(tmp_path):
    target = tmp_path / ".env"
    assert env_file_create(target, ROOT / ".env.example", env={})
    first = target.read_text()
    values = dotenv_values(target, interpolate=False)
    assert values["DEBUG"] == "true"
    assert len(values["SECRET_KEY"] or "") >= 50
    found = "local" if local_redis_answers() else "embedded"
    assert values["LIBRARY_REDIS"] == found
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    # Tools reading the same file (honcho run) see the same values.
    assert honcho_parse(first) == {k: v for k, v in values.items() if v is not None}
    # Never rewritten: the secret signs sessions, the choice is shared.
    assert not env_file_create(target, ROOT / ".env.example", env={})
    assert target.read_text() == first


def test_an_explicit_redis_url_is_recorded_as_it_is():
    assert env_file_redis({"REDIS_URL": "redis://cache:6379/0"}) == (
        "REDIS_URL",
        "redis://cache:6379/0",
    )
    assert env_file_redis({"LIBRARY_REDIS": "Embedded"}) == (
        "LIBRARY_REDIS",
        "embedded",
    )
    rendered = env_file_render(
        "DEBUG=true\nLIBRARY_REDIS=embedded\n",
        secret_key=SECRET,
        redis=("REDIS_URL", "redis://cache:6379/0"),
    )
    assert rendered == (
        f"DEBUG=true\nREDIS_URL=redis://cache:6379/0\nSECRET_KEY={SECRET}\n"
    )


def test_the_env_file_is_not_committed():
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in lines
    assert ".env.example" not in lines

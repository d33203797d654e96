"""Settings load from the environment and fail loudly, naming the variable.

Each case imports the settings in a fresh interpreter, as daphne or a worker would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "k" * 20 + "-production-secret-key-with-enough-entropy-0123456789",
    "ALLOWED_HOSTS": "library.example.org",
    "CSRF_TRUSTED_ORIGINS": "https://library.example.org",
}


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in PRODUCTION}
    base.pop("DJANGO_SETTINGS_MODULE", None)
    base.update({"LIBRARY_REDIS_DB": "15"}, **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.processes
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEBUG", "perhaps"),
        ("SECRET_KEY", "short"),
        ("DATABASE_URL", "nosuchdb://x/y"),
        ("REDIS_URL", "http://127.0.0.1:6379"),
        ("CSRF_TRUSTED_ORIGINS", "library.example.org"),
        ("LIBRARY_REDIS", "sometimes"),
    ],
)
def test_bad_value_stops_startup_naming_the_variable(variable, value):
    result = run_manage("check", env={**PRODUCTION, variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr.splitlines()[-1]


@pytest.mark.processes
def test_check_deploy_is_clean_with_production_values():
    result = run_manage("check", "--deploy", "--fail-level", "DEBUG", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.processes
def test_debug_without_secret_key_still_starts():
    result = run_manage("check", env={"DEBUG": "true"})
    assert result.returncode == 0, result.stderr


def test_sqlite_default_uses_wal_and_immediate_transactions(settings):
    options = settings.DATABASES["default"].get("OPTIONS", {})
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        pytest.skip("PostgreSQL run: the SQLite options do not apply")
    assert options["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in options["init_command"]
    assert options["timeout"] >= 5


def test_rq_commit_mode_is_on_db_commit(settings):
    assert settings.RQ["COMMIT_MODE"] == "on_db_commit"


@pytest.mark.processes
def test_the_fast_test_hasher_is_never_used_without_debug():
    script = (
        "from django.contrib.auth.hashers import get_hasher; "
        "print(get_hasher().algorithm)"
    )
    fast = {"LIBRARY_FAST_PASSWORD_HASHER": "true"}

    def algorithm(env: dict[str, str]) -> str:
        result = run_manage("shell", "-c", script, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]

    assert algorithm({**PRODUCTION, **fast}) == "pbkdf2_sha256"
    assert algorithm({"DEBUG": "true", **fast}) == "md5"

"""Typed readers for environment variables, and the development ``.env`` file.

Every reader raises ImproperlyConfigured naming the variable, so a bad value stops
start-up with a message an operator can act on instead of a traceback later.

``make run`` writes ``.env`` once from ``.env.example`` (``python -m config.env``):
DEBUG on, a generated SECRET_KEY and the Redis found at that moment. Settings load it
first, so a worker or daphne started by hand in another terminal runs with the same
values as the processes of ``make run``.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from dotenv import dotenv_values

from config.redis_server import MODES, choose_redis, local_redis_answers

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(
    name: str, default: str | None = None, *, env: Mapping[str, str] | None = None
) -> str:
    """Return the variable's text, the default when unset, or raise when required."""
    source = os.environ if env is None else env
    value = source.get(name)
    if value is None:
        if default is None:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_bool(name: str, default: bool, *, env: Mapping[str, str] | None = None) -> bool:
    """Return a boolean from true/false, yes/no, on/off or 1/0."""
    source = os.environ if env is None else env
    raw = source.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {raw!r}")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Return an integer, checked against an optional lower bound."""
    source = os.environ if env is None else env
    raw = source.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_list(
    name: str, default: list[str], *, env: Mapping[str, str] | None = None
) -> list[str]:
    """Return a comma-separated list with blanks dropped."""
    source = os.environ if env is None else env
    raw = source.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# --- The development .env file ----------------------------------------------------
# Names a different env file, or, set empty, turns loading off.
ENV_FILE_VARIABLE = "LIBRARY_ENV_FILE"
TEST_SETTINGS_MODULE = "config.settings_test"


def env_file_path(
    default: Path, *, env: Mapping[str, str] | None = None
) -> Path | None:
    """Return the env file to read: LIBRARY_ENV_FILE, else ``default``; None if off."""
    source = os.environ if env is None else env
    raw = source.get(ENV_FILE_VARIABLE)
    if raw is None:
        return default
    return Path(raw) if raw.strip() else None


def env_file_load(
    default: Path, *, env: MutableMapping[str, str] | None = None
) -> Path | None:
    """Copy the env file's variables into the environment, never over a set one.

    Return the file read, or None when there is none or loading is off.
    """
    source = os.environ if env is None else env
    if source.get("DJANGO_SETTINGS_MODULE") == TEST_SETTINGS_MODULE:
        # A test run is configured by config.settings_test alone: a developer's .env
        # must not point it at their Redis or database, nor change a setting. Turned
        # off in the environment, so the processes the tests start with
        # config.settings (config.processes.child_environment) skip it
        # too and keep using the Redis and database of the test run.
        source[ENV_FILE_VARIABLE] = ""
    path = env_file_path(default, env=source)
    if path is None or not path.is_file():
        return None
    # Values are literal (no ${VAR} expansion), as other readers of KEY=value files
    # (honcho, docker --env-file) take them.
    for name, value in dotenv_values(path, interpolate=False).items():
        # The environment wins, so production, CI and a one-off `DEBUG=false
        # manage.py check` are never overridden by a file left in the checkout.
        if value is not None:
            source.setdefault(name, value)
    return path


def env_file_redis(env: Mapping[str, str]) -> tuple[str, str]:
    """Return the variable and value that pin the Redis to use from now on.

    Without it, a process started later runs the auto-detection again and, once a
    Redis answers on 127.0.0.1:6379, attaches to it while the others keep the
    embedded server.
    """
    url = env.get("REDIS_URL", "").strip()
    if url:
        # choose_redis only validates an explicit URL; it starts nothing.
        return "REDIS_URL", choose_redis({"REDIS_URL": url}, Path()).url
    mode = env.get("LIBRARY_REDIS", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ImproperlyConfigured(
            f"LIBRARY_REDIS must be one of {', '.join(MODES)}, not {mode!r}"
        )
    if mode == "auto":
        mode = "local" if local_redis_answers() else "embedded"
    return "LIBRARY_REDIS", mode


def env_file_render(example: str, *, secret_key: str, redis: tuple[str, str]) -> str:
    """Return the example's text with the secret key and the Redis choice set.

    Each replaces its line in the example (REDIS_URL or LIBRARY_REDIS for the Redis),
    or is appended when the example has none.
    """
    wanted = {"SECRET_KEY": f"SECRET_KEY={secret_key}", "REDIS": "=".join(redis)}
    lines = []
    for line in example.splitlines():
        name = line.split("=", 1)[0].strip() if "=" in line else ""
        key = "REDIS" if name in {"LIBRARY_REDIS", "REDIS_URL"} else name
        lines.append(wanted.pop(key, line) if key in wanted else line)
    return "\n".join([*lines, *wanted.values()]) + "\n"


def env_file_create(
    target: Path, example: Path, *, env: Mapping[str, str] | None = None
) -> bool:
    """Write ``target`` from ``example`` unless it exists; return whether it wrote.

    An existing file is never touched: it holds the secret key sessions are signed
    with and the Redis choice every process shares.
    """
    if target.exists():
        return False
    source = os.environ if env is None else env
    # URL-safe characters only: in a KEY=value file "#" may start a comment, and
    # quotes and "$" are read specially by some readers.
    text = env_file_render(
        example.read_text(),
        secret_key=secrets.token_urlsafe(50),
        redis=env_file_redis(source),
    )
    try:
        # O_EXCL: two `make run` starting together write one file, not two secrets.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return True


def main(argv: list[str]) -> int:
    """Create the env file: ``python -m config.env EXAMPLE TARGET``."""
    if len(argv) != 2:
        print("usage: python -m config.env EXAMPLE TARGET", file=sys.stderr)
        return 2
    example, target = Path(argv[0]), Path(argv[1])
    if env_file_create(target, example):
        values = dotenv_values(target, interpolate=False)
        redis = next(
            f"{name}={value}"
            for name, value in values.items()
            if name in {"REDIS_URL", "LIBRARY_REDIS"}
        )
        print(f"Wrote {target} from {example}: a new SECRET_KEY, Redis {redis}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Typed readers for environment variables.

Every reader raises ImproperlyConfigured naming the variable, so a bad value stops
start-up with a message an operator can act on instead of a traceback later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

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

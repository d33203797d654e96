"""The kill switch: the environment variable ``LIBRARY_CACHE`` = ``on`` or ``off``.

It is read once per process, at the first ``cache_aside`` or
``stale_while_revalidate`` call (not at import). With ``off`` both call ``produce``
directly on every request, never touching Redis or the local tier, and still record
the origin metrics (``misses``, ``origin_calls``), so an uncached instance can be
measured beside a cached one. Any other value is logged and treated as ``on``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Final

logger = logging.getLogger(__name__)

CACHE_SWITCH_VARIABLE: Final = "LIBRARY_CACHE"

_switch: bool | None = None
_switch_lock = threading.Lock()


def _switch_read() -> bool:
    raw = os.environ.get(CACHE_SWITCH_VARIABLE, "on").strip().lower()
    if raw in ("", "on"):
        return True
    if raw == "off":
        logger.warning(
            "cache: %s=off, every read goes to the origin", CACHE_SWITCH_VARIABLE
        )
        return False
    logger.warning(
        "cache: %s=%r is neither on nor off; the cache stays on",
        CACHE_SWITCH_VARIABLE,
        raw,
    )
    return True


def cache_enabled() -> bool:
    """Return whether the read strategies use the cache (``LIBRARY_CACHE``).

    The variable is read at the first call in this process and remembered.
    """
    global _switch
    if _switch is None:
        with _switch_lock:
            if _switch is None:
                _switch = _switch_read()
    return _switch

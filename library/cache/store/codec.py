"""The stored form: compact JSON bytes.

Every size counted in the metrics is the length of those bytes. Values must therefore
survive a JSON round trip: dicts with text keys, lists, text, numbers, booleans and
None (a tuple comes back as a list).
"""

from __future__ import annotations

import json
import time
from typing import Any


def encode(value: object) -> bytes:
    """Return ``value`` as compact JSON bytes (the stored form)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> Any:
    """Return the value stored as ``data``."""
    return json.loads(data)


def ms_since(start: float) -> int:
    return round((time.perf_counter() - start) * 1000)

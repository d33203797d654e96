"""Pure retry policies, shared by the relay's workers and by the labs."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff: ``base * 2**(attempt-1)``, never above ``cap``."""

    base_ms: int = 500
    cap_ms: int = 30_000

    def delay_ms(self, attempt: int) -> int:
        """Return the un-jittered wait after failed attempt ``attempt`` (from 1)."""
        if attempt < 1:
            raise ValueError("attempts are counted from 1")
        # Cap the exponent first so a large attempt number cannot build a huge integer.
        exponent = min(attempt - 1, 62)
        return int(min(self.cap_ms, self.base_ms * 2**exponent))

    def full_jitter_ms(self, attempt: int, rand: Callable[[], float]) -> int:
        """Return a wait drawn uniformly from [0, delay]: spreads a retry wave out.

        ``rand`` returns a float in [0, 1); passing it in keeps the policy pure.
        """
        return int(rand() * self.delay_ms(attempt))


def partition_of(key: str, partitions: int) -> int:
    """Return the partition of a message key: the same key, the same partition.

    A numeric key (a book id) is taken modulo the partition count, as in the
    lesson; any other key by its CRC-32, which is stable across processes and
    Python versions (``hash()`` of a string is salted per process).
    """
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    if key.isdigit():
        return int(key) % partitions
    return zlib.crc32(key.encode()) % partitions

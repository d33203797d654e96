"""Counter writes batched per event loop: many callers, one pipeline, one client.

A daphne counts things at a rate of thousands a second (streams opening, frames
written for a broadcast). One Redis call each would take a connection each when
they arrive together and a round trip each always. ``LoopCounters`` joins every
amount added on one event loop before its writer runs into one pipeline on that
loop's one client; each caller returns once the write holding its amount is done,
so whoever reads the counters after an answer finds it counted. A Redis failure
is logged, never raised: counting never breaks what it counts.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

log = logging.getLogger("realtime")

# (pipeline, key, amount): queue one increment on the pipeline.
Increment = Callable[[Any, str, int], None]


@dataclass
class _Batch:
    amounts: dict[str, int] = field(default_factory=dict)
    done: asyncio.Future[None] | None = None
    writer: asyncio.Task[None] | None = None  # held: the loop keeps weak references


class LoopCounters:
    """Batched increments of one kind of counter, one batch per running loop."""

    def __init__(
        self, what: str, client: Callable[[], Any], increment: Increment
    ) -> None:
        self.what = what
        self._client = client
        self._increment = increment
        self._batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batch] = (
            weakref.WeakKeyDictionary()
        )

    async def add(self, amounts: dict[str, int]) -> None:
        """Add ``amounts`` (key → amount); return once they are written or failed."""
        done = self.add_nowait(amounts)
        # shield: a cancelled caller (the client left) does not cancel the write.
        await asyncio.shield(done)

    def add_nowait(self, amounts: dict[str, int]) -> asyncio.Future[None]:
        """Add ``amounts`` to this loop's next write; return its completion.

        Call on a running loop. For a caller that must not wait for Redis (a
        broadcast's reader with the next frame to hand out).
        """
        loop = asyncio.get_running_loop()
        batch = self._batches.get(loop)
        if batch is None:
            batch = self._batches[loop] = _Batch(done=loop.create_future())
            batch.writer = loop.create_task(self._flush(loop, batch))
        for key, amount in amounts.items():
            batch.amounts[key] = batch.amounts.get(key, 0) + amount
        assert batch.done is not None
        return batch.done

    async def _flush(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        if self._batches.get(loop) is batch:
            del self._batches[loop]
        try:
            pipe = self._client().pipeline(transaction=False)
            for key, amount in batch.amounts.items():
                self._increment(pipe, key, amount)
            await pipe.execute()
        except (redis.RedisError, OSError) as error:
            log.warning("%s not written: %s", self.what, error)
        finally:
            if batch.done is not None and not batch.done.done():
                batch.done.set_result(None)

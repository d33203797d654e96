"""Lab for "Hot Key and Stampede Effect": one key under concurrent load.

Model part, three measurements:

1. ``stampede`` — ``requests`` readers ask for the branch stock key in the same
   instant, while producing it from the origin takes ``origin_delay_ms``. Three read
   paths are compared: plain cache-aside, single-flight (one production per key, the
   rest await it) and stale-while-revalidate (an expired entry is served while one
   background refresh runs). The readers are real coroutines on an asyncio loop whose
   clock is virtual: when nothing is runnable the loop jumps to the next timer instead
   of sleeping, so the counts come out of genuinely interleaved async code and the
   run takes no wall time. The ``duration`` table reports the virtual time until the
   last reader had its answer.
2. ``expiry`` — ``keys`` entries are loaded in the same step. With a fixed lifetime
   they all expire in one step; adding a key-derived deviation in ``[0, jitter)``
   spreads them out.
3. ``shards`` — ``shard_requests`` requests, six in ten on one hot key, are routed to
   ``shards`` nodes by digest; splitting the hot key into ``copies`` copies (request
   ``i`` uses copy ``i % copies``) lowers the busiest shard's share.

The digest is the course's: the first 8 hex digits of the key's SHA-256 as a number.

The live part (``live.py``) repeats the stampede with real HTTP requests on real daphne
processes and counts the origin calls the servers made.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.hot_key_and_stampede_effect import live, model
from course.labs.hot_key_and_stampede_effect.params import (
    PARAMS,
    HotKeyParams,
)

__all__ = ["LAB"]


LAB = Lab(
    slug="hot-key-and-stampede-effect",
    title="Hot Key and Stampede Effect",
    params=PARAMS,
    params_type=HotKeyParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="stampede",
            label="strategy",
            values=("origin_calls", "pending_requests", "stale_responses"),
            title="Simultaneous readers: origin calls, waits and stale answers",
        ),
        Chart(
            table="expiry",
            label="lifetime",
            values=("highest_miss_in_step",),
            title="Most keys expiring in one step",
        ),
        Chart(
            table="shards",
            label="distribution",
            values=("busiest_pct",),
            title="Share of requests on the busiest shard",
            unit="%",
        ),
    ),
)

"""An asyncio event loop whose clock only the test moves.

Timers (``call_later``, ``wait_for`` timeouts) are due by the loop's ``time()``;
here that is ``now``, moved by ``advance``. A timer due at or before ``now`` runs on
the loop's next pass and one due later never does, so a deadline or an interval is
tested at its boundary exactly, and no real time passes for it.

Never await a real delay on this loop (``asyncio.sleep(0.05)``, ``await_until``):
it ends only once the test advances the clock past it. Yield with ``settle``; wait
for another thread with ``asyncio.to_thread(wait_until, ...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Whole seconds: adding binary fractions (0.125, 2**-10) to it stays exact.
START = 1000.0


class ManualClockLoop(asyncio.SelectorEventLoop):
    """A selector loop whose ``time()`` is ``now`` (starts at ``START``)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = START

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def manual_loop() -> ManualClockLoop:
    """The running loop, which ``run_manual`` made a ``ManualClockLoop``."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, ManualClockLoop)
    return loop


def run_manual(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``scenario()`` to its end on a fresh ``ManualClockLoop``."""
    with asyncio.Runner(loop_factory=ManualClockLoop) as runner:
        return runner.run(scenario())


async def settle(passes: int = 20) -> None:
    """Let the loop run what is ready (callbacks, woken tasks) without time passing."""
    for _ in range(passes):
        await asyncio.sleep(0)

"""Model runs in processes of their own, for the web process's explorable page.

A model run is CPU-bound Python. Made inside a daphne it would hold the process's
one interpreter lock against every other request the process serves: a class
moving sliders over new parameter sets slowed that process's pages and its kept
answers alike (``bench/explore.py`` measured it). Here the runs go to
``LAB_EXPLORE_PROCESSES`` worker processes, spawned on first use with Django set up
once each, and the web thread only waits for their tables, its lock free; the
operating system shares the cores between the web process and the runs.

A run the waiter gave up on (``timeout``) is kept when it finishes all the same
(``on_done``), so asking again finds it.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import TypeVar

from course.labs.harness.base import Params, Tables

log = logging.getLogger(__name__)
T = TypeVar("T")

_pool: ProcessPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()


def model_pool_run(
    slug: str,
    params: Params,
    *,
    processes: int,
    timeout: float,
    on_done: Callable[[Tables], None],
) -> Tables | None:
    """Run the model of ``slug`` in a worker process; return its tables, or None
    when they did not come within ``timeout`` seconds (the workers all busy)."""
    future = _submit(slug, params, processes)

    def kept(done: Future[Tables]) -> None:
        if not done.cancelled() and done.exception() is None:
            on_done(done.result())

    future.add_done_callback(kept)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        future.cancel()  # not started yet: let it go; started: kept when done
        return None
    except BrokenProcessPool:
        log.warning("a model worker died; the next run starts a new pool")
        _forget(processes)
        return None


def _forget(processes: int) -> None:
    global _pool
    with _lock:
        if _pool is not None and _pool_size == processes:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None


def _submit(slug: str, params: Params, processes: int) -> Future[Tables]:
    return _submit_call(partial(_child_run, slug, params), processes)


def _submit_call(call: Callable[[], T], processes: int) -> Future[T]:
    global _pool, _pool_size
    with _lock:
        for attempt in (1, 2):
            if _pool is None or _pool_size != processes:
                if _pool is not None:
                    _pool.shutdown(wait=False, cancel_futures=True)
                _pool = ProcessPoolExecutor(
                    max_workers=processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_child_setup,
                )
                _pool_size = processes
            try:
                return _pool.submit(call)
            except BrokenProcessPool:
                # A worker died (killed, out of memory): a new pool, once.
                log.warning("model pool broken; starting a new one (%d)", attempt)
                _pool = None
        raise RuntimeError("the model pool cannot start")


def model_pool_started(processes: int) -> bool:
    with _lock:
        return _pool is not None and _pool_size == processes


def model_pool_warm(processes: int) -> None:
    """Start the workers now, without waiting for them: a lesson page is being
    shown, and the learner's first new set should not wait for their start (a
    few seconds: each imports Django and the labs)."""
    if not model_pool_started(processes):
        try:
            _submit_call(_child_ready, processes)
        except RuntimeError:
            log.warning("the model pool could not start")


def model_pool_stop() -> None:
    """Stop the workers (tests; the pool also stops when the process exits)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None


def _child_setup() -> None:
    import django

    django.setup()


def _child_ready() -> None:
    """Nothing: a worker that ran it has started (``model_pool_warm``)."""


def _child_run(slug: str, params: Params) -> Tables:
    # A worker imports this module before Django is set up (to find _child_setup);
    # local import: the labs import models, which need it set up.
    from course.labs.registry import LABS

    return LABS[slug].run(params)["tables"]

"""Bounded enqueue in front of a real rq queue: the three policies and the counts."""

from __future__ import annotations

import threading
from typing import Any

import django_rq
import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from rq.job import Job, JobStatus

from config.processes import WAIT_S, wait_until
from jobs.backpressure import BLOCK_POLL_S, BoundedQueue, buffer_keys, buffer_stats

DONE: list[int] = []


class PollClock:
    """A blocked producer's clock and sleep: time moves only when it pauses.

    Each pause between two asks moves the clock ``step_s`` on (a binary fraction,
    so the sums are exact), whatever pause was asked for (``pauses`` keeps those).
    ``gated``: a pause also waits for the test's ``resume``, so the test sees the
    producer held between two asks.
    """

    def __init__(self, step_s: float, *, gated: bool = False) -> None:
        self.now = 0.0
        self.step_s = step_s
        self.pauses: list[float] = []
        self._gated = gated
        self._resumes = threading.Semaphore(0)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += self.step_s
        self.pauses.append(seconds)
        if self._gated and not self._resumes.acquire(timeout=WAIT_S):
            raise TimeoutError("the test never resumed the producer")

    def resume(self) -> None:
        self._resumes.release()


def redis_ms(redis: Redis) -> int:
    """Redis's clock in ms, read as the admit and start scripts read it."""
    seconds, micros = redis.time()
    return seconds * 1000 + micros // 1000


def record(n: int) -> None:
    DONE.append(n)


@pytest.fixture
def queue(redis_client) -> Queue:
    DONE.clear()
    return Queue("bp-test", connection=django_rq.get_connection("default"))


def drain(queue: Queue) -> None:
    worker: Any = SimpleWorker([queue], connection=queue.connection)
    worker.work(burst=True)


def offer(bounded: BoundedQueue, n: int) -> Any:
    return bounded.enqueue(record, n, job_id=f"job-{n}")


def test_drop_newest_refuses_the_new_job_and_says_which(queue):
    bounded = BoundedQueue(queue, capacity=2, policy="drop_newest")
    answers = [offer(bounded, n) for n in range(4)]
    assert [a.outcome for a in answers] == [
        "accepted",
        "accepted",
        "dropped",
        "dropped",
    ]
    assert answers[3].dropped_job_id == "job-3"
    assert queue.job_ids == ["job-0", "job-1"]
    drain(queue)
    assert DONE == [0, 1]
    stats = buffer_stats(queue.connection, "bp-test")
    assert (stats["produced"], stats["delivered"], stats["dropped"]) == (4, 2, 2)
    assert (stats["depth"], stats["peak"]) == (0, 2)


def test_drop_oldest_cancels_the_oldest_waiting_job_in_rq(queue):
    bounded = BoundedQueue(queue, capacity=2, policy="drop_oldest")
    answers = [offer(bounded, n) for n in range(4)]
    assert [a.outcome for a in answers][2:] == ["displaced", "displaced"]
    assert [a.dropped_job_id for a in answers][2:] == ["job-0", "job-1"]
    assert queue.job_ids == ["job-2", "job-3"]
    assert Job.fetch("job-0", connection=queue.connection).get_status() == (
        JobStatus.CANCELED
    )
    drain(queue)
    assert DONE == [2, 3]  # the youngest jobs reach the consumer
    stats = buffer_stats(queue.connection, "bp-test")
    assert (stats["delivered"], stats["dropped"], stats["depth"]) == (2, 2, 0)


def test_a_displaced_job_a_worker_already_took_is_not_run(queue):
    bounded = BoundedQueue(queue, capacity=1, policy="drop_oldest")
    offer(bounded, 0)
    # As the admit script does when it displaces job-0.
    queue.connection.zadd(buffer_keys("bp-test")[2], {"job-0": 0})
    queue.connection.zrem(buffer_keys("bp-test")[0], "job-0")
    drain(queue)  # the worker takes job-0 from rq's list before any cancel
    assert DONE == []
    assert buffer_stats(queue.connection, "bp-test")["skipped"] == 1


def blocking_on(queue, clock, *, timeout_s: float) -> BoundedQueue:
    """A one-place queue whose blocked producer waits on ``clock``, not real time."""
    return BoundedQueue(
        queue,
        capacity=1,
        policy="block",
        block_timeout_s=timeout_s,
        clock=clock,
        sleep=clock.sleep,
    )


def test_block_holds_the_producer_until_a_worker_makes_room(queue):
    clock = PollClock(0.25, gated=True)
    bounded = blocking_on(queue, clock, timeout_s=20)
    assert offer(bounded, 0).outcome == "accepted"
    answers: list[Any] = []
    producer = threading.Thread(target=lambda: answers.append(offer(bounded, 1)))
    producer.start()
    try:
        wait_until(lambda: len(clock.pauses) == 1, "the producer is refused")
        assert answers == []  # held: the queue is full
        clock.resume()
        wait_until(lambda: len(clock.pauses) == 2, "the producer is refused again")
        assert answers == []  # still held: no worker has made room
        drain(queue)  # starts job-0, which frees the place
    finally:
        clock.resume()
    producer.join(timeout=WAIT_S)
    assert answers[0].outcome == "held"
    assert answers[0].held_ms == 500.0  # two pauses of 250 ms, then admitted
    assert clock.pauses == [BLOCK_POLL_S] * 2
    drain(queue)
    assert DONE == [0, 1]
    stats = buffer_stats(queue.connection, "bp-test")
    assert stats["dropped"] == 0
    assert stats["held"] == 1
    assert stats["producer_wait_ms"] == 500


def test_block_gives_up_after_its_timeout(queue):
    clock = PollClock(0.0625)
    bounded = blocking_on(queue, clock, timeout_s=0.25)
    offer(bounded, 0)
    answer = offer(bounded, 1)
    assert answer.outcome == "dropped"
    # Asked at 0, 62.5, 125 and 187.5 ms (before the timeout: it paused and asked
    # again) and gave up at the ask at 250 ms, exactly the timeout.
    assert answer.held_ms == 250.0
    assert clock.pauses == [BLOCK_POLL_S] * 4
    assert queue.job_ids == ["job-0"]
    stats = buffer_stats(queue.connection, "bp-test")
    assert (stats["dropped"], stats["producer_wait_ms"]) == (1, 250)


def test_the_wait_of_delivered_jobs_is_measured_from_admission_to_start(queue):
    bounded = BoundedQueue(queue, capacity=5, policy="drop_newest")
    offer(bounded, 0)
    redis = queue.connection
    waiting = buffer_keys("bp-test")[0]
    admitted_ms = int(redis.zscore(waiting, "job-0"))
    # The score is the admission time (Redis's clock): admit job-0 250 ms earlier
    # instead of waiting 250 ms for a measurable wait.
    redis.zadd(waiting, {"job-0": admitted_ms - 250}, xx=True)
    before_ms = redis_ms(redis)
    drain(queue)
    after_ms = redis_ms(redis)
    stats = buffer_stats(redis, "bp-test")
    assert stats["delivered"] == 1
    # Measured on the same clock, from the admission to the start, which falls
    # between the two readings around the drain.
    lowest = before_ms - admitted_ms + 250
    assert lowest <= stats["wait_max_ms"] <= after_ms - admitted_ms + 250


def test_two_producers_never_both_take_the_last_place(queue):
    bounded = [BoundedQueue(queue, capacity=10, policy="drop_newest") for _ in "ab"]
    results: list[Any] = []

    def produce(index: int) -> None:
        for n in range(20):
            results.append(bounded[index].enqueue(record, n, job_id=f"{index}-{n}"))

    threads = [threading.Thread(target=produce, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.accepted for r in results) == 10
    assert len(queue.job_ids) == 10

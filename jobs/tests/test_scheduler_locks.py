"""The lease lock: atomic acquisition, owner-checked release, expiry and renewal,
in one process and across real ``manage.py`` processes."""

import datetime
import threading
from collections.abc import Callable

import pytest
from redis.exceptions import LockError, LockNotOwnedError
from redis.lock import Lock

from config.processes import kill, running, start_manage, wait_until
from course.labs.scheduled_tasks.live import probe_race
from course.labs.scheduled_tasks.model import trace_counts
from jobs.locks import LeaseLock, lease, lease_holder
from jobs.management.commands.scheduledrun import probe_keys, probe_lease_name


def text(items: list[bytes]) -> list[str]:
    return [item.decode() for item in items]


def renewed(redis_client, key: str, times: int) -> Callable[[], bool]:
    """A ``wait_until`` condition: the lease ``key`` was renewed ``times`` times.

    Each renewal puts the key's PTTL back up to a full lease; between two it only
    falls. Polled far more often than the renewals (a third of a lease apart), so a
    renewal is missed only if the poll stalls, and then the wait is longer, never
    shorter. A lease gone in between fails the test at once.
    """
    last = redis_client.pttl(key)
    seen = 0

    def check() -> bool:
        nonlocal last, seen
        remaining = redis_client.pttl(key)
        assert remaining > 0, f"lease {key} lost after {seen} renewals"
        if remaining > last:
            seen += 1
        last = remaining
        return seen >= times

    return check


# --- one process ---------------------------------------------------------------------


def test_only_one_acquisition_wins_and_only_the_owner_releases(redis_client):
    first = LeaseLock(redis_client, "t", lease_ms=10_000)
    second = LeaseLock(redis_client, "t", lease_ms=10_000)
    assert first.owner != second.owner
    assert first.acquire()
    assert not second.acquire()
    with pytest.raises(LockError):
        second.release()  # not the holder: the key is left alone
    assert not second.release_if_owned()
    assert redis_client.get("lease:t").decode() == first.owner
    assert first.release_if_owned()
    assert redis_client.get("lease:t") is None
    assert not first.release_if_owned()  # released already: a no-op
    assert second.acquire()


def test_a_lease_expires_so_a_crashed_holder_blocks_for_one_lease_at_most(
    redis_client,
):
    crashed = LeaseLock(redis_client, "t", lease_ms=200)
    assert crashed.acquire()  # and never releases
    late = LeaseLock(redis_client, "t", lease_ms=200)
    assert not late.acquire()
    # One lease at most: Redis's own clock ends it, so poll until it has.
    assert 0 < redis_client.pttl("lease:t") <= 200
    wait_until(lambda: not redis_client.exists("lease:t"), "the lease expires")
    assert late.acquire()
    # The crashed holder, back from the dead, cannot renew or remove the new
    # holder's lease.
    with pytest.raises(LockNotOwnedError):
        crashed.reacquire()
    assert crashed.lost.is_set()
    with pytest.raises(LockNotOwnedError):
        crashed.release()
    assert redis_client.get("lease:t").decode() == late.owner


def test_the_lease_is_set_in_whole_milliseconds(redis_client, monkeypatch):
    # redis-py's Lock keeps seconds and truncates: timeout=1.001 sets 1000 ms.
    sent = []
    real_set = redis_client.set

    def spy(*args, **kwargs):
        sent.append(kwargs["px"])
        return real_set(*args, **kwargs)

    monkeypatch.setattr(redis_client, "set", spy)
    assert Lock(redis_client, "plain", timeout=1.001).acquire()
    assert LeaseLock(redis_client, "t", lease_ms=1001).acquire()
    assert sent == [1000, 1001]


def test_another_thread_can_renew_and_release_the_lease(redis_client):
    held = LeaseLock(redis_client, "t", lease_ms=10_000)
    assert held.acquire()
    done: list[bool] = []

    def finish():
        done.append(held.reacquire())
        done.append(held.release_if_owned())

    worker = threading.Thread(target=finish)
    worker.start()
    worker.join()
    assert done == [True, True]
    assert redis_client.get("lease:t") is None


def test_renewal_keeps_a_long_run_holding_past_its_lease(redis_client):
    # Renewed every third of a lease: a renewal thread starved for two thirds of
    # one (a loaded machine) would lose it, so the lease is not made too short.
    with lease(redis_client, "t", lease_ms=1000) as held:
        assert held is not None
        # Ten renewals, a third of a lease apart: held for more than three leases.
        wait_until(renewed(redis_client, "lease:t", 10), "ten renewals")
        assert not LeaseLock(redis_client, "t", lease_ms=1000).acquire()
        assert not held.lost.is_set()
    assert redis_client.get("lease:t") is None  # released at the end of the block


def test_lease_reports_holder_and_expiry(redis_client):
    now = datetime.datetime(2026, 2, 1, 2, tzinfo=datetime.UTC)
    assert lease_holder(redis_client, "t", now=now) is None
    with lease(redis_client, "t", lease_ms=60_000, renew=False) as held:
        assert held is not None
        holder = lease_holder(redis_client, "t", now=now)
        assert holder is not None
        assert holder.owner == held.owner
        remaining = holder.expires_at - now
        assert (
            datetime.timedelta(seconds=55) < remaining <= datetime.timedelta(seconds=60)
        )
        with lease(redis_client, "t", lease_ms=60_000) as other:
            assert other is None  # someone holds it: the block learns it and skips


# --- real processes ------------------------------------------------------------------

# The holder keeps the lease this long: long enough that a probe descheduled between
# the release and its attempt (two cores, three processes) still finds it held, as a
# late scheduler on another machine would inside a longer report.
HOLD_MS = 1500


def run_probes(redis_client, run: str, labels: str, *, locked: bool) -> list[str]:
    """The scheduled-tasks lab's race of ``scheduledrun probe`` processes."""
    return probe_race(redis_client, run, labels, locked=locked, hold_ms=HOLD_MS)


@pytest.mark.processes
def test_real_processes_started_together_never_hold_the_lease_at_once(redis_client):
    for round_ in range(2):
        trace = run_probes(redis_client, f"race-{round_}", "ABC", locked=True)
        runs, skipped, peak = trace_counts(trace)
        assert (runs, skipped, peak) == (1, 2, 1)
        assert len(trace) == 4  # one started/done pair, two skips
        assert redis_client.get(f"lease:{probe_lease_name(f'race-{round_}')}") is None
    # The same start without the lock: the check above would see the overlap.
    unlocked = run_probes(redis_client, "race-free", "ABC", locked=False)
    runs, _, peak = trace_counts(unlocked)
    assert peak >= 2
    assert runs == 3


@pytest.mark.processes
def test_a_killed_holder_loses_the_lease_after_one_term(redis_client):
    run = "killed"
    keys = probe_keys(run)
    name = probe_lease_name(run)
    holder = start_manage(
        "scheduledrun",
        "probe",
        "--run",
        run,
        "--label",
        "A",
        "--hold-ms",
        "60000",
        "--lease-ms",
        "1000",
    )
    with running(holder):

        def ready() -> bool:
            assert holder.poll() is None, "the holder exited"
            return redis_client.llen(keys["ready"]) >= 1

        wait_until(ready, "the holder is ready")
        redis_client.rpush(keys["go"], "go")
        wait_until(
            lambda: text(redis_client.lrange(keys["trace"], 0, -1)) == ["started A"],
            "the holder starts",
        )
        # Three lease terms later it still holds: its renewals keep the lease.
        wait_until(renewed(redis_client, f"lease:{name}", 9), "nine renewals")
        owner = redis_client.get(f"lease:{name}")
        assert owner is not None
        assert f":{holder.pid}:" in owner.decode()
        kill(holder)  # no finally, no release
        assert not LeaseLock(redis_client, name, lease_ms=1000).acquire()
        # Lost after one term at most: what is left of it, then Redis ends it.
        assert 0 < redis_client.pttl(f"lease:{name}") <= 1000
        wait_until(
            lambda: not redis_client.exists(f"lease:{name}"), "the lease expires"
        )
        assert LeaseLock(redis_client, name, lease_ms=1000).acquire()

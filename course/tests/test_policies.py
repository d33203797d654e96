"""The lab service's rules as pure functions: turns, cost, quotas, waits."""

from __future__ import annotations

import datetime
import uuid

from course.labs.harness.base import Params
from course.labs.registry import lab_get
from course.policies import (
    Limits,
    RefusalKind,
    Spent,
    Usage,
    Waiting,
    fair_order,
    fair_owner,
    quota_check,
    run_cost,
    run_fingerprint,
    wait_estimate,
)

T0 = datetime.datetime(2026, 12, 5, 10, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def waiting(owner: str, second: float) -> Waiting:
    return Waiting(uuid.uuid4(), owner, at(second))


def owners(order: list[Waiting]) -> list[str]:
    return [run.owner for run in order]


# --- turns -------------------------------------------------------------------------


def test_one_learners_five_runs_do_not_stand_before_everyone_elses_first():
    runs = [waiting("ann", n) for n in range(5)]
    runs += [waiting("bob", 10), waiting("cy", 11)]
    assert owners(fair_order(runs, {})) == [
        "ann",
        "bob",
        "cy",
        "ann",
        "ann",
        "ann",
        "ann",
    ]


def test_within_a_round_the_owner_served_longest_ago_goes_first():
    runs = [waiting("ann", 0), waiting("bob", 1), waiting("cy", 2)]
    served = {"ann": at(-10), "bob": at(-300)}  # cy never served
    assert owners(fair_order(runs, served)) == ["cy", "bob", "ann"]


def test_each_owners_runs_keep_their_own_order():
    first, second = waiting("ann", 5), waiting("ann", 1)
    assert fair_order([first, second], {}) == [second, first]
    assert fair_order([], {}) == []


def test_anonymous_runs_take_turns_by_address_not_by_session():
    assert fair_owner(visitor="user:7", client="abc") == "user:7"
    assert fair_owner(visitor="anon:s1", client="abc") == "addr:abc"
    assert fair_owner(visitor="anon:s2", client="abc") == "addr:abc"
    assert fair_owner(visitor="anon:s3", client="") == "anon:s3"


# --- cost ----------------------------------------------------------------------------


def test_the_default_run_costs_one_and_size_parameters_scale_it():
    metrics = lab_get("cache-metrics")
    assert run_cost(metrics, metrics.defaults()) == 1.0
    heavy = {
        **metrics.defaults(),
        "requests": 200_000,
        "capacities": list(range(1, 13)),
    }
    assert run_cost(metrics, heavy) == 200.0  # 100x the requests, 2x the capacities
    seeded = {**metrics.defaults(), "seed": 1}
    assert run_cost(metrics, seeded) == 1.0  # a seed changes nothing of the work
    tiny = {**metrics.defaults(), "requests": 0}
    assert run_cost(metrics, tiny) == 0.05  # never free


def test_identical_experiments_share_a_fingerprint_and_the_live_part_tells_apart():
    params: Params = {"b": 2, "a": [1, 2]}
    same = run_fingerprint("x", {"a": [1, 2], "b": 2}, live=False)
    assert run_fingerprint("x", params, live=False) == same
    assert run_fingerprint("x", params, live=True) != same
    assert run_fingerprint("y", params, live=False) != same


# --- quotas ------------------------------------------------------------------------


def limits(**changed: object) -> Limits:
    base: dict[str, object] = {
        "signed_in": True,
        "live_allowed": True,
        "in_flight": 3,
        "address_in_flight": None,
        "live_per_hour": 2,
        "cost_per_run": 250.0,
        "cost_per_hour": 100.0,
        "anonymous_cost_per_run": 5.0,
    }
    base.update(changed)
    return Limits(**base)  # type: ignore[arg-type]


def usage(in_flight: int = 0, address: int = 0, *spent: Spent) -> Usage:
    return Usage(in_flight=in_flight, address_in_flight=address, last_hour=spent)


def check(lim: Limits, use: Usage, *, cost: float = 1.0, live: bool = False):
    return quota_check(
        limits=lim, usage=use, cost=cost, live=live, now=at(3600), typical_run_s=12.4
    )


def test_a_run_within_every_quota_passes():
    assert check(limits(), usage()) is None


def test_live_runs_need_an_account_and_the_right():
    anonymous = limits(signed_in=False, live_allowed=False)
    refusal = check(anonymous, usage(), live=True)
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEEDS_ACCOUNT
    assert refusal.retry_after_s is None
    withdrawn = check(limits(live_allowed=False), usage(), live=True)
    assert withdrawn is not None
    assert withdrawn.kind is RefusalKind.WITHDRAWN
    assert check(limits(live_allowed=False), usage(), live=False) is None


def test_heavy_runs_need_an_account_and_heavier_ones_are_refused_outright():
    anonymous = limits(signed_in=False, cost_per_run=5.0, address_in_flight=6)
    refusal = check(anonymous, usage(), cost=200.0)
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEEDS_ACCOUNT
    assert "Sign up" in refusal.message
    assert "200" in refusal.message
    too_heavy = check(limits(), usage(), cost=300.0)
    assert too_heavy is not None
    assert too_heavy.kind is RefusalKind.TOO_HEAVY


def test_runs_in_flight_are_capped_with_a_retry_after():
    refusal = check(limits(), usage(3))
    assert refusal is not None
    assert refusal.kind is RefusalKind.BUSY
    assert refusal.retry_after_s == 13  # a typical run, rounded up
    crowd = limits(signed_in=False, address_in_flight=6, cost_per_run=5.0)
    by_address = check(crowd, usage(0, 6))
    assert by_address is not None
    assert by_address.kind is RefusalKind.BUSY
    assert "network" in by_address.message


def test_the_hours_live_runs_free_up_as_the_oldest_ages_out():
    spent = (Spent(at(600), 1.0, True), Spent(at(1800), 1.0, True))
    refusal = check(limits(), usage(0, 0, *spent), live=True)
    assert refusal is not None
    assert refusal.kind is RefusalKind.HOURLY
    # The first live run (at 600 s) leaves the window at 4200 s; now is 3600 s.
    assert refusal.retry_after_s == 600
    assert check(limits(), usage(0, 0, *spent), live=False) is None


def test_the_hours_cost_budget_says_when_enough_has_aged_out():
    spent = (Spent(at(100), 60.0, False), Spent(at(2000), 30.0, False))
    assert check(limits(), usage(0, 0, *spent), cost=10.0) is None  # 100: fits
    refusal = check(limits(), usage(0, 0, *spent), cost=20.0)
    assert refusal is not None
    assert refusal.kind is RefusalKind.HOURLY
    assert refusal.retry_after_s == 100  # the 60 at 100 s leaves at 3700 s
    never = check(limits(cost_per_run=500.0), usage(), cost=150.0)
    assert never is not None
    assert never.kind is RefusalKind.TOO_HEAVY


def test_runs_older_than_an_hour_do_not_count():
    old = (Spent(at(-10), 99.0, True), Spent(at(-5), 99.0, True))
    assert check(limits(), usage(0, 0, *old), live=True) is None


# --- waits -------------------------------------------------------------------------


def test_a_wait_is_whole_waves_of_a_typical_run():
    assert wait_estimate(ahead=0, slots=2, typical_run_s=30.0) == 0
    assert wait_estimate(ahead=1, slots=2, typical_run_s=30.0) == 0
    assert wait_estimate(ahead=2, slots=2, typical_run_s=30.0) == 30
    assert wait_estimate(ahead=5, slots=2, typical_run_s=30.0) == 60
    assert wait_estimate(ahead=5, slots=2, typical_run_s=None) is None
    assert wait_estimate(ahead=5, slots=0, typical_run_s=30.0) is None

"""The poison-messages-and-retry lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests.labs import reference_poison_messages_and_retry as ref
from course.tests.labs.lab_results import (
    assert_no_children_left,
    columns,
    live_tables,
    records,
    rows,
    run,
)

POISON = "poison-messages-and-retry"


def test_poison_messages_defaults_reproduce_the_course():
    result = run(POISON)
    assert result["params"] == {
        "base_ms": 500,
        "cap_ms": 30000,
        "budget_ms": 300000,
        "consumers": 200,
        "attempts": 4,
        "bucket_ms": 100,
        "seed": 20250720,
    }
    assert records(result, "counter_position") == [
        {"position": "on catch", "restarts": 12, "delivered": 14, "deaths": 12,
         "processed": 2, "dead_letters": 0, "remaining": 3},
        {"position": "at delivery", "restarts": 3, "delivered": 7, "deaths": 2,
         "processed": 4, "dead_letters": 1, "remaining": 0},
    ]  # fmt: skip
    assert columns(result, "schedule") == [
        "attempt",
        "immediate",
        "fixed_2s",
        "exponential",
        "exponential_cap",
    ]
    schedule = records(result, "schedule")
    assert [r["attempt"] for r in schedule] == [1, 2, 3, 4, 5, 6, 7, 8, "total"]
    assert {r["immediate"] for r in schedule} == {0}
    assert [r["fixed_2s"] for r in schedule] == [2000] * 8 + [16000]
    assert [r["exponential"] for r in schedule] == [
        500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 127500,
    ]  # fmt: skip
    assert [r["exponential_cap"] for r in schedule] == [
        500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 91500,
    ]  # fmt: skip
    assert records(result, "budget") == [
        {"schedule": "immediate", "attempts": "unlimited", "elapsed_ms": 0},
        {"schedule": "fixed 2 s", "attempts": 150, "elapsed_ms": 300000},
        {"schedule": "exponential", "attempts": 9, "elapsed_ms": 255500},
        {"schedule": "exponential + cap", "attempts": 14, "elapsed_ms": 271500},
    ]
    assert records(result, "jitter") == [
        {"schedule": "no jitter", "total_requests": 800, "peak_per_bucket": 200,
         "filled_buckets": 4, "last_bucket": 75},
        {"schedule": "full jitter", "total_requests": 800, "peak_per_bucket": 69,
         "filled_buckets": 65, "last_bucket": 67},
        {"schedule": "decorrelated jitter", "total_requests": 800,
         "peak_per_bucket": 28, "filled_buckets": 163, "last_bucket": 389},
    ]  # fmt: skip


def test_poison_reference_agrees_with_the_lab_on_defaults():
    result = run(POISON)
    assert rows(result, "counter_position") == ref.counter_position()
    assert rows(result, "schedule") == ref.backoff_schedule(500, 30000)
    assert rows(result, "budget") == ref.backoff_budget(500, 30000, 300000)
    assert rows(result, "jitter") == ref.retry_wave(**WAVE_DEFAULTS)


WAVE_DEFAULTS = {
    "base_ms": 500,
    "cap_ms": 30000,
    "consumers": 200,
    "attempts": 4,
    "bucket_ms": 100,
    "seed": 20250720,
}


POISON_CASES = [
    {"base_ms": 100, "cap_ms": 5000, "budget_ms": 60000},
    {"base_ms": 1000, "cap_ms": 500, "budget_ms": 10000},  # cap below base
    {"base_ms": 0, "cap_ms": 30000, "budget_ms": 300000},  # never waits
    {"base_ms": 500, "cap_ms": 0, "budget_ms": 1000},
    {"base_ms": 500, "cap_ms": 30000, "budget_ms": 0},
    {"base_ms": 7, "cap_ms": 1_000_000, "budget_ms": 2_000_000},  # fixed: unlimited
    {"base_ms": 1, "cap_ms": 100_000_000, "budget_ms": 1_000_000_000},
    {"consumers": 1, "attempts": 1, "bucket_ms": 1, "seed": 0},
    {"consumers": 50, "attempts": 9, "bucket_ms": 250, "seed": 2**31 - 1},
    {"consumers": 300, "attempts": 6, "bucket_ms": 7, "seed": 12345, "cap_ms": 4000},
    {"consumers": 120, "attempts": 12, "bucket_ms": 1000, "base_ms": 333},
]


@pytest.mark.parametrize("overrides", POISON_CASES)
def test_poison_messages_matches_reference(overrides):
    p = {**WAVE_DEFAULTS, "budget_ms": 300000, **overrides}
    result = run(POISON, **p)
    base, cap = p["base_ms"], p["cap_ms"]
    assert rows(result, "schedule") == ref.backoff_schedule(base, cap)
    assert rows(result, "budget") == ref.backoff_budget(base, cap, p["budget_ms"])
    wave = {name: p[name] for name in WAVE_DEFAULTS}
    assert rows(result, "jitter") == ref.retry_wave(**wave)
    assert rows(result, "counter_position") == ref.counter_position()


@settings(max_examples=25, deadline=None)
@given(
    base_ms=st.integers(0, 5000),
    cap_ms=st.integers(0, 200_000),
    budget_ms=st.integers(0, 5_000_000),
    consumers=st.integers(1, 60),
    attempts=st.integers(1, 10),
    bucket_ms=st.integers(1, 2000),
    seed=st.integers(0, 2**31 - 1),
)
def test_poison_messages_matches_reference_property(**p):
    result = run(POISON, **p)
    assert rows(result, "schedule") == ref.backoff_schedule(p["base_ms"], p["cap_ms"])
    assert rows(result, "budget") == ref.backoff_budget(
        p["base_ms"], p["cap_ms"], p["budget_ms"]
    )
    assert rows(result, "jitter") == ref.retry_wave(
        base_ms=p["base_ms"],
        cap_ms=p["cap_ms"],
        consumers=p["consumers"],
        attempts=p["attempts"],
        bucket_ms=p["bucket_ms"],
        seed=p["seed"],
    )


def test_poison_schedule_uses_the_systems_backoff():
    from messaging.policies import Backoff

    result = run(POISON, base_ms=250, cap_ms=9000)
    policy = Backoff(base_ms=250, cap_ms=9000)
    capped = [row[4] for row in rows(result, "schedule")[:8]]
    assert capped == [policy.delay_ms(n) for n in range(1, 9)]


def test_jitter_spreads_the_wave_without_changing_its_size():
    wave = {r["schedule"]: r for r in records(run(POISON, seed=99), "jitter")}
    assert {r["total_requests"] for r in wave.values()} == {800}
    assert wave["no jitter"]["peak_per_bucket"] == 200  # all in the same slot
    assert wave["full jitter"]["peak_per_bucket"] != 200


def test_poison_validate_rejects_the_same_values_as_the_command():
    with pytest.raises(ParamError, match="consumers \\* attempts"):
        lab_get(POISON).validate({"consumers": 5000, "attempts": 21})


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_poison_live_isolates_the_worker_killer_at_claim_time(redis_client):
    tables = live_tables("poison-messages-and-retry")
    assert rows(tables, "live_counter_position") == [
        ["at claim (live system)", 2, 4, 1]
    ]
    claims = {r[0]: r for r in rows(tables, "live_claims")}
    assert claims[3][1:] == [
        3,
        "dead letter: the worker died during 2 earlier attempt(s)",
    ]
    assert all(claims[n][2] == "done" for n in (1, 2, 4, 5))
    # The model's row with the counter at delivery isolates as well, a death earlier.
    model = {r[0]: r for r in rows(tables, "counter_position")}["at delivery"]
    assert (model[4], model[5]) == (4, 1)
    assert_no_children_left()

"""The four messaging labs: the course's printed tables, a reference, the command."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests import reference_messaging as ref
from course.tests.lab_results import (
    assert_charts_name_numeric_columns,
    assert_refused,
    columns,
    lab_form_page,
    lab_json,
    records,
    rows,
    run,
)

RATIONALE = "rationale-for-asynchronous-processing"
DELIVERY = "delivery-semantics"
DEAD_LETTERS = "dead-letter-queues"
POISON = "poison-messages-and-retry"


# --- the course's printed output, copied from the lessons ---------------------------
# Expected rows are written as records (column -> value) so that a wrong column order
# shows up as a readable diff.


def test_rationale_defaults_reproduce_the_course():
    result = run(RATIONALE)
    assert result["params"] == {"success_probability": 0.999}
    assert columns(result, "steps") == ["step", "ms", "kind", "accumulated_ms"]
    assert records(result, "steps") == [
        {"step": "authorization check", "ms": 3, "kind": "required",
         "accumulated_ms": 3},
        {"step": "writing the loan record", "ms": 9, "kind": "required",
         "accumulated_ms": 12},
        {"step": "overdue notification", "ms": 140, "kind": "deferrable",
         "accumulated_ms": 152},
        {"step": "branch stock summary recalculation", "ms": 260,
         "kind": "deferrable", "accumulated_ms": 412},
        {"step": "monthly report line", "ms": 55, "kind": "deferrable",
         "accumulated_ms": 467},
    ]  # fmt: skip
    assert records(result, "summary") == [
        {
            "all_in_request_ms": 467,
            "required_only_ms": 12,
            "shortening_ratio": 0.974,
            "throughput_before": 2.1,
            "throughput_after": 83.3,
            "success_before": 0.99501,
            "success_after": 0.998,
        }
    ]
    assert records(result, "durability") == [
        {"handoff": "in memory", "loan_rows": 3, "recoverable_jobs": 0},
        {"handoff": "outbox", "loan_rows": 3, "recoverable_jobs": 9},
    ]
    # the nine side jobs each version had handed off before the process went away
    assert records(result, "handed_off") == [
        {"handoff": "in memory", "side_jobs": 9},
        {"handoff": "outbox", "side_jobs": 9},
    ]


def test_delivery_semantics_defaults_reproduce_the_course():
    result = run(DELIVERY)
    assert result["params"] == {"messages": 12, "crashes": [3, 7, 11]}
    assert columns(result, "modes") == [
        "mode",
        "delivered",
        "effect",
        "lost",
        "repeated",
    ]
    assert records(result, "modes") == [
        {"mode": "at-most-once", "delivered": 12, "effect": 9, "lost": 3,
         "repeated": 0},
        {"mode": "at-least-once", "delivered": 15, "effect": 15, "lost": 0,
         "repeated": 3},
        {"mode": "deduplication", "delivered": 15, "effect": 12, "lost": 0,
         "repeated": 0},
    ]  # fmt: skip
    assert columns(result, "external") == [
        "order",
        "calls",
        "effect",
        "lost",
        "repeated",
    ]
    assert records(result, "external") == [
        {"order": "effect first, ack after", "calls": 2, "effect": 2, "lost": 0,
         "repeated": 1},
        {"order": "ack first, effect after", "calls": 0, "effect": 0, "lost": 1,
         "repeated": 0},
        {"order": "effect first + dedup at receiver", "calls": 2, "effect": 1,
         "lost": 0, "repeated": 0},
    ]  # fmt: skip


def test_dead_letter_queues_defaults_reproduce_the_course():
    result = run(DEAD_LETTERS)
    assert result["params"] == {
        "messages": 20,
        "permanent": [7, 13],
        "threshold": 3,
        "thresholds": [1, 2, 3, 5, 8],
    }
    assert columns(result, "retry") == [
        "mode",
        "rounds",
        "delivered",
        "succeeded",
        "wasted",
        "remaining_depth",
        "dead_letters",
    ]
    assert records(result, "retry") == [
        {"mode": "unbounded", "rounds": 8, "delivered": 34, "succeeded": 18,
         "wasted": 16, "remaining_depth": 2, "dead_letters": 0},
        {"mode": "unbounded", "rounds": 24, "delivered": 66, "succeeded": 18,
         "wasted": 48, "remaining_depth": 2, "dead_letters": 0},
        {"mode": "threshold=3", "rounds": 8, "delivered": 24, "succeeded": 18,
         "wasted": 6, "remaining_depth": 0, "dead_letters": 2},
    ]  # fmt: skip
    assert columns(result, "selection") == [
        "threshold",
        "processed",
        "wasted_attempts",
        "wrongly_isolated",
        "permanently_isolated",
    ]
    by_threshold = {r["threshold"]: r for r in records(result, "selection")}
    assert list(by_threshold) == [1, 2, 3, 5, 8]
    assert [r["processed"] for r in by_threshold.values()] == [9, 9, 14, 18, 18]
    assert [r["wasted_attempts"] for r in by_threshold.values()] == [
        11, 22, 28, 36, 42,
    ]  # fmt: skip
    assert [r["wrongly_isolated"] for r in by_threshold.values()] == [9, 9, 4, 0, 0]
    assert {r["permanently_isolated"] for r in by_threshold.values()} == {2}
    # the redrive run: both records carry what a redrive needs; then all 20 processed
    assert records(result, "dead_letters") == [
        {"message": m, "type": "overdue_notification", "attempt": 3,
         "source": "job_queue", "body": f'{{"loanId":{m}}}',
         "last_error": f"member not found (loan {m})"}
        for m in (7, 13)
    ]  # fmt: skip
    assert records(result, "redrive") == [
        {"first_pass_processed": 18, "pending_after_first_pass": 0, "redriven": 2,
         "second_pass_processed": 2, "processed": 20, "pending": 0,
         "dead_letters": 0},
    ]  # fmt: skip
    assert records(result, "selection_workload") == [
        {"messages": 20, "permanently_broken": 2, "clears_on_3": 5, "clears_on_5": 4}
    ]


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


def test_the_reference_agrees_with_the_lab_on_defaults():
    """The reference is only worth trusting if it lands on the course's numbers too."""
    result = run(RATIONALE)
    expected = ref.rationale(0.999)
    for name in ("steps", "summary", "durability"):
        assert rows(result, name) == expected[name]
    result = run(DELIVERY)
    assert rows(result, "modes") == ref.delivery_modes(12, [3, 7, 11])
    assert rows(result, "external") == ref.delivery_external()
    result = run(DEAD_LETTERS)
    assert rows(result, "retry") == ref.dead_letter_retry(20, [7, 13], 3)
    selection = ref.dead_letter_selection(20, [7, 13], [1, 2, 3, 5, 8])
    assert rows(result, "selection") == selection
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


# --- other parameter values against the reference -----------------------------------


@pytest.mark.parametrize(
    "p", [0.0, 1.0, 0.5, 0.9, 0.95, 0.99, 0.9999, 0.123456789, 0.8, 0.31]
)
def test_rationale_matches_reference(p):
    result = run(RATIONALE, success_probability=p)
    expected = ref.rationale(p)
    for name in ("steps", "summary", "durability"):
        assert rows(result, name) == expected[name]


@settings(max_examples=20, deadline=None)
@given(p=st.floats(0, 1))
def test_rationale_success_matches_reference_property(p):
    assert (
        rows(run(RATIONALE, success_probability=p), "summary")
        == (ref.rationale(p)["summary"])
    )


@pytest.mark.parametrize(
    ("messages", "crashes"),
    [
        (1, [1]),
        (1, [2]),
        (12, [1, 12]),
        (12, [12, 12, 3]),
        (30, [3, 7, 11]),
        (40, list(range(1, 41, 2))),
        (7, [100, 200]),
        (500, [1, 250, 499, 500, 501]),
    ],
)
def test_delivery_semantics_matches_reference(messages, crashes):
    result = run(DELIVERY, messages=messages, crashes=crashes)
    assert rows(result, "modes") == ref.delivery_modes(messages, crashes)
    assert rows(result, "external") == ref.delivery_external()


@settings(max_examples=25, deadline=None)
@given(
    messages=st.integers(1, 60),
    crashes=st.lists(st.integers(1, 70), min_size=1, max_size=12),
)
def test_delivery_semantics_matches_reference_property(messages, crashes):
    result = run(DELIVERY, messages=messages, crashes=crashes)
    assert rows(result, "modes") == ref.delivery_modes(messages, crashes)


@pytest.mark.parametrize(
    ("messages", "permanent", "threshold", "thresholds"),
    [
        (1, [1], 1, [1]),
        (20, [7, 13], 8, [8, 9, 10]),
        (20, [7, 13], 9, [1]),  # above 8 rounds: nothing reaches the dead letters
        (20, [7, 13], 24, [4, 6, 7]),
        (30, [1, 2, 3, 15, 30], 2, [1, 2, 3, 4, 5, 6]),
        (15, [40], 5, [5, 3, 1]),  # an id past the last message changes nothing
        (200, list(range(10, 200, 10)), 4, [2, 4, 16, 100]),
    ],
)
def test_dead_letter_queues_matches_reference(
    messages, permanent, threshold, thresholds
):
    result = run(
        DEAD_LETTERS,
        messages=messages,
        permanent=permanent,
        threshold=threshold,
        thresholds=thresholds,
    )
    assert rows(result, "retry") == ref.dead_letter_retry(
        messages, permanent, threshold
    )
    assert rows(result, "selection") == ref.dead_letter_selection(
        messages, permanent, thresholds
    )
    records, summary = ref.dead_letter_redrive(messages, permanent, threshold)
    assert rows(result, "dead_letters") == records
    assert rows(result, "redrive") == [summary]


@settings(max_examples=25, deadline=None)
@given(
    messages=st.integers(1, 80),
    permanent=st.lists(st.integers(1, 90), min_size=1, max_size=8),
    threshold=st.integers(1, 30),
    thresholds=st.lists(st.integers(1, 30), min_size=1, max_size=6),
)
def test_dead_letter_queues_matches_reference_property(
    messages, permanent, threshold, thresholds
):
    result = run(
        DEAD_LETTERS,
        messages=messages,
        permanent=permanent,
        threshold=threshold,
        thresholds=thresholds,
    )
    assert rows(result, "retry") == ref.dead_letter_retry(
        messages, permanent, threshold
    )
    assert rows(result, "selection") == ref.dead_letter_selection(
        messages, permanent, thresholds
    )


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


# --- the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "table", "first_row"),
    [
        (RATIONALE, "summary", [467, 12, 0.974, 2.1, 83.3, 0.99501, 0.998]),
        (DELIVERY, "modes", ["at-most-once", 12, 9, 3, 0]),
        (DEAD_LETTERS, "retry", ["unbounded", 8, 34, 18, 16, 2, 0]),
        (POISON, "jitter", ["no jitter", 800, 200, 4, 75]),
    ],
)
def test_lab_json_from_the_command_line(slug, table, first_row):
    assert lab_json(slug)["tables"][table]["rows"][0] == first_row


def test_command_sets_list_values():
    data = lab_json(DEAD_LETTERS, "--set", "thresholds=4,6", "--set", "threshold=2")
    assert data["tables"]["retry"]["rows"][2][0] == "threshold=2"
    assert [row[0] for row in data["tables"]["selection"]["rows"]] == [4, 6]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([RATIONALE, "--set", "success_probability=1.5"], "must be at most 1"),
        ([RATIONALE, "--set", "success_probability=-0.1"], "must be at least 0"),
        ([DELIVERY, "--set", "messages=-1"], "must be at least 0"),
        ([DELIVERY, "--set", "crashes=3,x"], "'x' is not a whole number"),
        ([DELIVERY, "--set", "crashes=0"], "must be at least 1"),
        ([DEAD_LETTERS, "--set", "threshold=0"], "must be at least 1"),
        ([DEAD_LETTERS, "--set", "thresholds=0"], "must be at least 1"),
        ([POISON, "--set", "bucket_ms=0"], "must be at least 1"),
        ([POISON, "--set", "consumers=0"], "must be at least 1"),
        ([POISON, "--set", "base_ms=-5"], "must be at least 0"),
        ([POISON, "--set", "consumers=10000", "--set", "attempts=50"], "at most"),
        ([POISON, "--set", "seed=2147483648"], "must be at most"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(*args, needle=needle)


def test_validate_rejects_the_same_values_as_the_command():
    with pytest.raises(ParamError, match="consumers \\* attempts"):
        lab_get(POISON).validate({"consumers": 5000, "attempts": 21})


# --- the lesson pages ---------------------------------------------------------------


@pytest.mark.parametrize("slug", [RATIONALE, DELIVERY, DEAD_LETTERS, POISON])
def test_every_chart_names_columns_the_model_produces(slug):
    assert_charts_name_numeric_columns(slug)


@pytest.mark.django_db
@pytest.mark.parametrize("slug", [RATIONALE, DELIVERY, DEAD_LETTERS, POISON])
def test_lesson_page_offers_the_lab_form(client, slug):
    lab_form_page(client, slug)

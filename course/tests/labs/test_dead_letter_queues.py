"""The dead-letter-queues lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.tests.labs import reference_dead_letter_queues as ref
from course.tests.labs.lab_results import (
    assert_no_children_left,
    columns,
    lab_json,
    live_tables,
    records,
    rows,
    run,
)
from messaging.models import DeadLetter

DEAD_LETTERS = "dead-letter-queues"


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


def test_dead_letter_queues_reference_agrees_with_the_lab_on_defaults():
    result = run(DEAD_LETTERS)
    assert rows(result, "retry") == ref.dead_letter_retry(20, [7, 13], 3)
    selection = ref.dead_letter_selection(20, [7, 13], [1, 2, 3, 5, 8])
    assert rows(result, "selection") == selection


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


def test_dead_letter_queues_command_sets_list_values():
    data = lab_json(DEAD_LETTERS, "--set", "thresholds=4,6", "--set", "threshold=2")
    assert data["tables"]["retry"]["rows"][2][0] == "threshold=2"
    assert [row[0] for row in data["tables"]["selection"]["rows"]] == [4, 6]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_dead_letter_queues_live_drains_isolates_and_redrives(redis_client):
    tables = live_tables("dead-letter-queues")
    assert rows(tables, "live_redrive") == [
        ["first drain", 18, 2, 24],
        ["after redriving 2", 20, 0, 2],
    ]
    letters = rows(tables, "live_dead_letters")
    assert [(r[0], r[1], r[2], r[3]) for r in letters] == [
        (7, "lab_probe", 3, "lab_probe"),
        (13, "lab_probe", 3, "lab_probe"),
    ]
    assert all("ProbeFailure" in r[5] and '"fail":true' in r[4] for r in letters)
    assert DeadLetter.objects.filter(redriven_at__isnull=True).count() == 0
    assert_no_children_left()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_dead_letter_queues_live_says_it_uses_the_system_threshold(redis_client):
    tables = live_tables("dead-letter-queues", messages=6, permanent=[2], threshold=5)
    first, after = rows(tables, "live_redrive")
    assert first == ["first drain (system threshold 3, not the parameter)", 5, 1, 8]
    assert after == ["after redriving 1", 6, 0, 1]

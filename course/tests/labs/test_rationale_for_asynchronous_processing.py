"""The rationale-for-asynchronous-processing lab: its model against the course and an
independent reference, its live part on real processes, its command line and lesson
page.
"""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import LabError
from course.tests.labs import reference_rationale_for_asynchronous_processing as ref
from course.tests.labs.lab_results import (
    assert_no_children_left,
    columns,
    live_tables,
    records,
    rows,
    run,
)
from library.models import Book, Branch, Loan, Member
from messaging.registry import MessageType, subscriptions_for

RATIONALE = "rationale-for-asynchronous-processing"


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


def test_rationale_reference_agrees_with_the_lab_on_defaults():
    """The reference is only worth trusting if it lands on the course's numbers too."""
    result = run(RATIONALE)
    expected = ref.rationale(0.999)
    for name in ("steps", "summary", "durability"):
        assert rows(result, name) == expected[name]


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


def make_library() -> list[int]:
    branch = Branch.objects.create(name="Central", city="C")
    books = [
        Book.objects.create(title=f"Book {n}", author="A", branch=branch, on_shelf=2)
        for n in range(3)
    ]
    for n in range(3):
        Member.objects.create(
            first_name="M", last_name=str(n), registered_at=datetime.date(2024, 1, 1)
        )
    return [book.pk for book in books]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_rationale_live_in_memory_loses_side_jobs_the_outbox_keeps_them(
    redis_client,
):
    books = make_library()
    tables = live_tables("rationale-for-asynchronous-processing")
    # A loan's side jobs are the subscriptions its message reaches: three in the
    # lesson; the system's count is whatever its registry holds.
    per_loan = [s.name for s in subscriptions_for(MessageType.LOAN_ISSUED)]
    jobs = 3 * len(per_loan)
    assert rows(tables, "live_durability") == [
        ["in memory", 3, 0],
        ["outbox", 3, jobs],
    ]
    if len(per_loan) == 3:
        assert rows(tables, "live_durability") == rows(tables, "durability")
    names = " ".join(per_loan)
    assert rows(tables, "live_side_jobs") == [
        ["in memory", names, jobs, 0, 0, 0],
        ["outbox", names, jobs, None, jobs, jobs],
    ]
    # Six loans were issued by the killed children and all were returned.
    assert Loan.objects.count() == 6
    assert not Loan.objects.filter(return_date__isnull=True).exists()
    assert list(
        Book.objects.filter(pk__in=books).values_list("on_shelf", flat=True)
    ) == [2, 2, 2]
    assert_no_children_left()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_rationale_live_without_library_data_says_what_is_missing(redis_client):
    with pytest.raises(LabError, match="seed_library"):
        live_tables("rationale-for-asynchronous-processing")

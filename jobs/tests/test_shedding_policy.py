"""The load-shedding policy: route classes and the bounds of each class."""

from __future__ import annotations

from jobs.shedding_policy import Limits, Priority, route_class


def test_route_classes_put_loan_returns_above_reports_and_exempt_long_polls():
    assert route_class("/loans/12/return/") == Priority.CRITICAL
    assert route_class("/books/3/") == Priority.NORMAL
    assert route_class("/course/backpressure/run") == Priority.LOW
    assert route_class("/jobs/abc/wait") is None
    assert route_class("/realtime/jobs/abc/wait") is None
    assert route_class("/realtime/branches/3/events") is None
    assert route_class("/realtime/reports/loans.csv") == Priority.LOW
    assert route_class("/static/js/lab.js") is None


def test_only_the_critical_class_uses_the_reserved_places_and_budgets_scale():
    limits = Limits(max_running=4, reserved=2, budget_ms=1000)
    assert limits.running_limit(Priority.CRITICAL) == 6
    assert limits.running_limit(Priority.NORMAL) == 4
    assert limits.running_limit(Priority.LOW) == 4
    assert limits.budget_s(Priority.CRITICAL) == 2.0
    assert limits.budget_s(Priority.NORMAL) == 1.0
    assert limits.budget_s(Priority.LOW) == 0.5

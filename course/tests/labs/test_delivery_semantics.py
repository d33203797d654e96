"""The delivery-semantics lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.tests.labs import reference_delivery_semantics as ref
from course.tests.labs.lab_results import (
    assert_no_children_left,
    columns,
    live_tables,
    records,
    rows,
    run,
)

DELIVERY = "delivery-semantics"


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


def test_delivery_semantics_reference_agrees_with_the_lab_on_defaults():
    result = run(DELIVERY)
    assert rows(result, "modes") == ref.delivery_modes(12, [3, 7, 11])
    assert rows(result, "external") == ref.delivery_external()


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


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_delivery_semantics_live_reaches_the_course_counts(redis_client):
    tables = live_tables("delivery-semantics")
    assert tables["live_modes"]["columns"] == tables["modes"]["columns"]
    by_mode = {row[0]: row[1:] for row in rows(tables, "live_modes")}
    modes = ["at-most-once", "at-least-once", "deduplication"]
    assert list(by_mode) == modes
    # (lost, repeated) per mode, then (delivered, effect) per mode
    assert [by_mode[mode][2:] for mode in modes] == [[3, 0], [0, 3], [0, 0]]
    assert [by_mode[mode][:2] for mode in modes] == [[12, 9], [15, 15], [15, 12]]
    assert rows(tables, "live_modes") == rows(tables, "modes")
    assert_no_children_left()
    assert not list(redis_client.scan_iter(match="*lab-live-*"))

"""The message-queues lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.tests.labs import reference_message_queues as reference
from course.tests.labs.lab_results import (
    assert_no_children_left,
    live_tables,
    rows,
    run,
)


def test_message_queues_defaults_reproduce_the_course():
    result = run("message-queues")
    assert result["params"]["visibility"] == 30
    assert result["tables"]["unacknowledged"] == {
        "columns": ["t", "consumer", "message", "delivered", "status"],
        "rows": [
            [0, "consumer-1", 1, 1, "acknowledged"],
            [0, "consumer-1", 2, 1, "left unacknowledged"],
            [0, "consumer-1", 3, 1, "acknowledged"],
            [30, "consumer-2", 2, 2, "acknowledged"],
        ],
    }
    assert result["tables"]["competing"] == {
        "columns": ["consumer", "messages"],
        "rows": [["consumer-1", 4], ["consumer-2", 4], ["consumer-3", 4]],
    }
    assert result["tables"]["depth"] == {
        "columns": ["consumers", "depths"],
        "rows": [[1, "2 4 6 8 10 12"], [2, "0 0 0 0 0 0"], [3, "0 0 0 0 0 0"]],
    }
    # the course's depth/visible lines and its delivery total
    assert rows(result, "queue_state") == [[0, 1, 0], [30, 1, 1], [30, 0, 0]]
    assert rows(result, "deliveries")[0] == ["unacknowledged", 3, 3, 4, 0]


@settings(max_examples=60, deadline=None)
@given(
    visibility=st.one_of(st.integers(1, 10_000), st.floats(0.001, 1e5)),
    consumers=st.lists(st.integers(1, 20), min_size=1, max_size=5),
    rounds=st.integers(1, 40),
    production=st.integers(0, 40),
    consumption_rate=st.integers(0, 20),
)
def test_message_queues_matches_reference(
    visibility, consumers, rounds, production, consumption_rate
):
    result = run(
        "message-queues",
        visibility=visibility,
        consumers=consumers,
        rounds=rounds,
        production=production,
        consumption_rate=consumption_rate,
    )
    assert rows(result, "unacknowledged") == reference.unacknowledged_rows(visibility)
    assert rows(result, "competing") == [[f"consumer-{i}", 4] for i in (1, 2, 3)]
    assert rows(result, "depth") == [
        [n, reference.queue_depths(n, rounds, production, consumption_rate)]
        for n in consumers
    ]


def test_visibility_moves_the_redelivery_time():
    assert rows(run("message-queues", visibility=45), "unacknowledged")[3][0] == 45
    assert rows(run("message-queues", visibility=2.5), "unacknowledged")[3][0] == 2.5


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database  # claims: SKIP LOCKED or compare-and-set
def test_message_queues_live_redelivers_after_the_lease(redis_client):
    tables = live_tables("message-queues")
    live = rows(tables, "live_unacknowledged")
    assert [(r[0], r[2], r[3]) for r in live] == [
        (1, 1, "acknowledged"),
        (2, 1, "died holding the lease"),
        (3, 1, "acknowledged"),
        (2, 2, "acknowledged after the lease ran out"),
    ]
    assert live[1][1] != live[3][1]  # another process took the abandoned message
    [[messages, deliveries, lease_s, after_s]] = rows(tables, "live_deliveries")
    assert (messages, deliveries, lease_s) == (3, 4, 2)
    assert after_s >= lease_s
    # the model's own total for the same experiment
    assert rows(tables, "deliveries")[0][3] == deliveries
    assert_no_children_left()

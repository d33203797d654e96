"""The broadcast-and-channel-management lab: its model against the course and an
independent reference, its live part on real processes, its command line and lesson
page.
"""

from __future__ import annotations

import pytest

from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests.labs.lab_results import rows, tables_of


def test_broadcast_model_equals_the_course_with_two_instances():
    assert rows(tables_of("broadcast-and-channel-management"), "delivery") == [
        ["no relay", 0, 0, 0],
        ["with relay", 1, 1, 2],
    ]


@pytest.mark.parametrize("instances", [3, 4, 6])
def test_broadcast_model_copies_once_per_instance(instances):
    # The relay writes to every listening instance, the sender included.
    tables = tables_of("broadcast-and-channel-management", instances=instances)
    assert rows(tables, "delivery")[1] == ["with relay", 1, 1, instances]


def test_broadcast_lab_rejects_a_single_instance():
    with pytest.raises(ParamError):
        lab_get("broadcast-and-channel-management").resolve({"instances": "1"})


@pytest.mark.processes
def test_broadcast_live_part_reaches_the_other_instance_only_over_redis(
    transactional_db, redis_client, library
):
    tables = tables_of("broadcast-and-channel-management", live=True)
    assert rows(tables, "live_delivery") == [
        ["memory", 0, 1, 0],
        ["redis", 1, 1, 1],
    ]

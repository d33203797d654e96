"""Every lab parameter at its boundaries: the model answers, or one clear line refuses.

For each lab and each parameter the values a learner would try first — the minimum,
the maximum, 0, 1, an empty list, a one-item list — go through ``Lab.resolve`` (the
path of ``--set`` and of the lesson form) and, when accepted, through the model part.
Only ``LabError`` may come out of either, with a one-line message naming the parameter.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from course.forms import LabForm
from course.labs.harness.base import Cell, Lab, LabError, Param, ParamValue
from course.labs.registry import LABS
from course.management.commands.lab_params import page_text
from course.params_page import PAGE_PATH, parameters_markdown

# A maximum whose model run takes well over two seconds is tried at a smaller value
# that takes the same code path (the loops only get longer past it). Measured maxima,
# on an idle machine: cache-metrics requests=200000 > 8 s, cache-key-design
# requests=100000 5 s, invalidation ops=200000 4 s, ordering events=20000 2.4 s,
# cache-layers requests / cache-strategies ops=200000 2 s each.
COSTLY_MAXIMUM: dict[tuple[str, str], ParamValue] = {
    ("cache-metrics", "requests"): 10000,
    ("cache-key-design", "requests"): 20000,
    ("invalidation", "ops"): 20000,
    ("ordering-and-partitioning", "events"): 2000,
    ("cache-layers", "requests"): 20000,
    ("cache-strategies", "ops"): 20000,
}
SLOW_S = 15.0  # a runaway guard; the machine may be shared


def _number(param: Param, value: float) -> int | float:
    return int(value) if param.kind == "int" else float(value)


def boundary_values(lab: Lab[Any], param: Param) -> list[ParamValue]:
    """Return the values to try for ``param``, each once."""
    values: list[ParamValue] = []

    def add(value: ParamValue) -> None:
        if value not in values:
            values.append(value)

    costly = COSTLY_MAXIMUM.get((lab.slug, param.name))
    if param.kind in ("int", "float"):
        for bound in (param.minimum, param.maximum):
            if bound is not None:
                add(_number(param, bound))
        if costly is not None:
            values.remove(_number(param, param.maximum or 0))
            add(costly)
        add(_number(param, 0))
        add(_number(param, 1))
        if param.minimum is not None and param.exclusive_minimum:
            add(_number(param, param.minimum + 1))
    elif param.kind == "int_list":
        low = int(param.minimum) if param.minimum is not None else 0
        high = int(param.maximum) if param.maximum is not None else 10
        add([])
        add([low])
        add([high] if costly is None else [int(costly)])  # type: ignore[arg-type]
        add([0])
        add([1])
        add([low] * param.max_items)
    return values


CASES = [
    pytest.param(lab, param, value, id=f"{lab.slug}-{param.name}={value!r}")
    for lab in LABS.values()
    for param in lab.params
    for value in boundary_values(lab, param)
]


def _assert_one_line_naming(error: LabError, name: str) -> None:
    message = str(error)
    assert message, "an empty refusal"
    assert "\n" not in message, message
    assert name in message, f"the refusal does not name {name}: {message}"


@pytest.mark.parametrize(("lab", "param", "value"), CASES)
def test_a_boundary_value_is_answered_or_refused_in_one_line(lab, param, value):
    text = param.text(value)
    try:
        params = lab.resolve({param.name: text})
    except LabError as error:
        _assert_one_line_naming(error, param.name)
        return
    assert params[param.name] == value
    started = time.monotonic()
    try:
        result = lab.run(params)  # the model only: no live part, no processes
    except LabError as error:
        _assert_one_line_naming(error, param.name)
        return
    assert time.monotonic() - started < SLOW_S, "pick a cheaper value in COSTLY_MAXIMUM"
    for name, table in result["tables"].items():
        width = len(table["columns"])
        assert all(len(row) == width for row in table["rows"]), name


LIST_PARAMS = [
    pytest.param(lab, param, id=f"{lab.slug}-{param.name}")
    for lab in LABS.values()
    for param in lab.params
    if param.kind == "int_list"
]


@pytest.mark.parametrize(("lab", "param"), LIST_PARAMS)
def test_an_empty_list_parses_exactly_where_it_means_none(lab, param):
    for text in ("", " ", "none", "None"):
        if param.min_items == 0:
            assert param.parse(text) == []
        else:
            with pytest.raises(LabError) as refused:
                param.parse(text)
            _assert_one_line_naming(refused.value, param.name)
    assert param.text([]) == "none"


def answer(slug: str, **overrides: str) -> dict[str, list[list[Cell]]]:
    lab = LABS[slug]
    result = lab.run(lab.resolve(overrides))
    return {name: t["rows"] for name, t in result["tables"].items()}


def test_a_cache_layer_of_capacity_zero_is_off():
    rows = answer("cache-layers", client_capacity="0", edge_capacity="0")
    shares = {row[0]: row[1] for row in rows["chain"]}
    assert shares["client"] == shares["edge"] == 0
    assert isinstance(shares["server"], int)
    assert isinstance(shares["origin"], int)
    assert shares["server"] + shares["origin"] == 600
    rows = answer(
        "cache-layers", client_capacity="0", edge_capacity="0", server_capacity="0"
    )
    assert [row[1] for row in rows["chain"]] == [0, 0, 0, 600]
    assert rows["chain"][-1][2] == 100


def test_cache_metrics_without_a_cache_and_without_capacity_rows():
    rows = answer("cache-metrics", capacities="0", breakdown_capacity="0")
    [capacity] = rows["capacity"]
    assert capacity[:4] == [0, 0, 2000, 0]  # capacity, hits, misses, hit ratio
    assert capacity[5] == 2000  # every request reaches the origin
    assert rows["totals"][0][0] == 0
    assert answer("cache-metrics", capacities="none")["capacity"] == []


def test_empty_lists_mean_no_such_rows():
    rows = answer("invalidation", lifetimes="none", delays="none")
    assert [row[0] for row in rows["invalidation"]] == ["version"]
    rows = answer("hot-key-and-stampede-effect", copies="none")
    assert [row[0] for row in rows["shards"]] == ["single key"]
    assert answer("message-queues", consumers="none")["depth"] == []
    rows = answer(
        "ordering-and-partitioning", workers="none", partitions="", hot_partitions=""
    )
    assert rows["competing"] == rows["partitioned"] == rows["hot_key"] == []
    assert answer("worker-processes", workers="none")["pool"] == []
    assert answer("dead-letter-queues", thresholds="none")["selection"] == []


def test_no_crash_and_no_poison_message_lose_nothing():
    for row in answer("delivery-semantics", crashes="none")["modes"]:
        assert row[3:] == [0, 0], row  # lost, repeated
    rows = answer("delivery-semantics", messages="1", crashes="1")
    assert len(rows["modes"]) == 3
    assert answer("delivery-semantics", messages="0")["modes"] == [
        [mode, 0, 0, 0, 0]
        for mode in ("at-most-once", "at-least-once", "deduplication")
    ]
    rows = answer("dead-letter-queues", messages="0")
    assert all(row[2:] == [0, 0, 0, 0, 0] for row in rows["retry"])
    rows = answer("dead-letter-queues", messages="1", permanent="none")
    assert all(row[-1] == 0 for row in rows["retry"])  # no dead letters


def test_counts_of_zero_and_one():
    rows = answer("message-queues", consumers="0", production="5", rounds="3")
    assert rows["depth"] == [[0, "5 10 15"]]
    assert answer("worker-processes", jobs="0", workers="1")["pool"] == [[1, 0, 0]]
    assert answer("worker-processes", jobs="1", workers="1")["pool"] == [[1, 1, 1]]
    assert answer("load-shedding", requests="0")["latency"] == []
    rows = answer("load-shedding", requests="1", max_concurrent="1", max_queue="0")
    assert [row[1:] for row in rows["latency"]] == [[200, 3, 1], [200, 3, 1]]
    stopped = answer("backpressure", consume_per_s="0")["policies"]
    assert all(row[2] == 0 for row in stopped)  # nothing delivered
    rows = answer("hot-key-and-stampede-effect", shard_requests="0", copies="2")
    assert [row[1] for row in rows["shards"]] == [None, None]  # NaN in the course
    rows = answer("hot-key-and-stampede-effect", lifetime="0", jitter="0")
    assert rows["expiry"][0] == ["fixed lifetime", 1, 200]


@pytest.mark.parametrize(
    ("slug", "name", "text"),
    [
        ("cache-layers", "server_capacity", "0"),
        ("backpressure", "consume_per_s", "0"),
        ("ordering-and-partitioning", "workers", "none"),
        ("delivery-semantics", "messages", "0"),
        ("dead-letter-queues", "messages", "0"),
    ],
)
def test_a_live_part_refuses_what_only_the_model_can_run_before_starting(
    slug, name, text
):
    """The check comes first in the live part: no process starts, no row is written."""
    lab = LABS[slug]
    params = lab.resolve({name: text})
    with pytest.raises(LabError) as refused:
        lab.live_run(params, lambda fraction, label: None)
    message = str(refused.value)
    assert message.startswith(f"{name}: "), message
    assert "\n" not in message, message


def test_the_live_load_shedding_of_no_request_is_an_empty_table():
    lab = LABS["load-shedding"]
    tables = lab.live_run(lab.resolve({"requests": "0"}), lambda fraction, label: None)
    assert tables["live_latency"]["rows"] == []


def test_the_lesson_form_takes_none_for_an_empty_list_and_keeps_defaults_on_blank():
    lab = LABS["cache-metrics"]
    form = LabForm(
        lab, data={"capacities": "none", "breakdown_capacity": "0", "requests": ""}
    )
    assert form.is_valid(), form.errors
    assert form.params["capacities"] == []
    assert form.params["breakdown_capacity"] == 0
    assert form.params["requests"] == 2000
    refused = LabForm(LABS["worker-processes"], data={"workers": "0"})
    assert not refused.is_valid()
    assert refused.errors["workers"] == ["workers: must be at least 1, got 0"]


def test_the_parameter_page_is_what_the_registry_writes():
    # course/PARAMETERS.md is generated (manage.py lab_params --write): it must be
    # exactly what the registry's Param lists and course/params_notes.py make now.
    assert PAGE_PATH.read_text(encoding="utf-8") == page_text(), (
        "course/PARAMETERS.md is out of date: run manage.py lab_params --write"
    )


def test_the_parameter_page_lists_every_parameter_with_its_default():
    text = page_text()
    for slug, lab in LABS.items():
        assert f"### `{slug}`" in text, slug
        for param in lab.params:
            row = f"| `{param.name}` | {param.kind} | `{param.text(param.default)}` |"
            assert row in text, (slug, row)


def test_a_note_for_a_lab_the_registry_lacks_stops_the_generator():
    with pytest.raises(ValueError, match="no-such-lab"):
        parameters_markdown({}, {"no-such-lab": "a note"})

import importlib
import pkgutil
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import Cell, LabResult, ParamError, clean_cell
from course.labs.registry import LABS, UnknownLab, lab_get
from course.lessons import LESSONS, lesson_get
from course.tests import reference


def run(slug: str, **overrides: Any) -> LabResult:
    lab = lab_get(slug)
    return lab.run(lab.validate(overrides))


def rows(result: LabResult, name: str) -> list[list[Cell]]:
    return result["tables"][name]["rows"]


def test_every_lab_belongs_to_a_lesson_and_there_are_25_lessons():
    assert len(LESSONS) == 25
    assert {lab.slug for lab in LABS.values()} <= {lesson.slug for lesson in LESSONS}
    lesson = lesson_get("cache-layers")
    assert lesson is not None
    assert lesson.url.endswith("/asynchronous-processing/cache-layers")


def test_a_lab_package_never_shadows_its_submodules():
    """``course.labs.<lab>.model`` is the module: ``__init__`` imports it as one."""
    import course.labs

    shadowed = []
    for lab in pkgutil.iter_modules(course.labs.__path__):
        if not lab.ispkg:
            continue
        package = importlib.import_module(f"course.labs.{lab.name}")
        for sub in pkgutil.iter_modules(package.__path__):
            name = f"{package.__name__}.{sub.name}"
            importlib.import_module(name)
            found = getattr(package, sub.name)
            if not isinstance(found, types.ModuleType) or found.__name__ != name:
                shadowed.append(name)
    assert shadowed == []


def test_cache_layers_defaults_reproduce_the_course():
    result = run("cache-layers")
    assert result["params"] == {
        "requests": 600,
        "users": 40,
        "seed": 20250729,
        "client_capacity": 4,
        "edge_capacity": 10,
        "server_capacity": 200,
    }
    assert result["tables"]["repetition"] == {
        "columns": ["requests", "unique_keys", "origin_queries", "repeat_queries"],
        "rows": [[600, 53, 600, 547]],
    }
    chain = result["tables"]["chain"]
    assert chain["columns"] == ["layer", "requests", "share_pct"]
    assert [row[0] for row in chain["rows"]] == ["client", "edge", "server", "origin"]
    assert [row[1] for row in chain["rows"]] == [98, 189, 260, 53]
    assert [row[2] for row in chain["rows"]] == [16.3, 31.5, 43.3, 8.8]


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


@pytest.mark.parametrize(
    "params",
    [
        {"requests": 0},
        {"requests": 1},
        {"requests": 5000, "users": 7},
        {"seed": 0, "client_capacity": 1, "edge_capacity": 1, "server_capacity": 1},
        {"seed": 2**31 - 1, "users": 1},
        {"seed": 12345, "edge_capacity": 40, "server_capacity": 5},
        {"requests": 2500, "users": 300, "seed": 777, "client_capacity": 30},
    ],
)
def test_cache_layers_matches_reference_for_other_values(params):
    lab = lab_get("cache-layers")
    full = lab.validate(params)
    expected = reference.cache_layers(**full)  # type: ignore[arg-type]
    result = lab.run(full)
    assert rows(result, "repetition") == expected["repetition"]
    assert rows(result, "chain") == expected["chain"]


@settings(max_examples=40, deadline=None)
@given(
    requests=st.integers(0, 1500),
    users=st.integers(1, 120),
    seed=st.integers(0, 2**31 - 1),
    client_capacity=st.integers(1, 12),
    edge_capacity=st.integers(1, 40),
    server_capacity=st.integers(1, 300),
)
def test_cache_layers_matches_reference_property(**params):
    lab = lab_get("cache-layers")
    expected = reference.cache_layers(**params)
    result = lab.run(lab.validate(params))
    assert rows(result, "repetition") == expected["repetition"]
    assert rows(result, "chain") == expected["chain"]
    assert sum(int(row[1] or 0) for row in rows(result, "chain")) == params["requests"]


def test_cache_layers_with_no_requests_prints_null_shares():
    result = run("cache-layers", requests=0)
    assert [row[2] for row in rows(result, "chain")] == [None] * 4


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


@pytest.mark.parametrize(
    ("slug", "name", "text", "reason"),
    [
        ("message-queues", "visibility", "0", "visibility: must be greater than 0"),
        ("message-queues", "visibility", "-3", "visibility: must be greater than 0"),
        ("message-queues", "visibility", "abc", "visibility: 'abc' is not a number"),
        ("message-queues", "consumers", "-1", "consumers: must be at least 0"),
        ("message-queues", "consumers", "1,x", "consumers: 'x' is not a whole number"),
        ("message-queues", "consumers", "101", "consumers: must be at most 100"),
        ("message-queues", "rounds", "2.5", "rounds: '2.5' is not a whole number"),
        ("cache-layers", "users", "0", "users: must be at least 1"),
        (
            "cache-layers",
            "client_capacity",
            "-1",
            "client_capacity: must be at least 0",
        ),
        ("cache-layers", "requests", "999999999", "requests: must be at most 200000"),
        ("cache-layers", "seed", "-1", "seed: must be at least 0"),
    ],
)
def test_bad_values_are_rejected_with_one_line(slug, name, text, reason):
    with pytest.raises(ParamError) as info:
        lab_get(slug).resolve({name: text})
    message = str(info.value)
    assert message.startswith(reason)
    assert "\n" not in message


def test_list_parameters_take_comma_separated_values():
    params = lab_get("message-queues").resolve({"consumers": " 1, 4,9 "})
    assert params["consumers"] == [1, 4, 9]


def test_unknown_parameter_and_lab_are_errors():
    with pytest.raises(ParamError, match="has no parameter 'nope'"):
        lab_get("cache-layers").resolve({"nope": "1"})
    with pytest.raises(UnknownLab, match="no lab named 'nope'"):
        lab_get("nope")


def test_stored_params_are_checked_by_type():
    lab = lab_get("cache-layers")
    with pytest.raises(ParamError):
        lab.validate({"requests": "600"})
    with pytest.raises(ParamError):
        lab.validate({"requests": True})


def test_cells_print_whole_numbers_as_ints_and_nan_as_null():
    assert clean_cell(11.0) == 11
    assert isinstance(clean_cell(11.0), int)
    assert clean_cell(14.5) == 14.5
    assert clean_cell(float("nan")) is None


def test_progress_is_reported_in_order():
    seen = []
    lab = lab_get("cache-layers")
    lab.run(lab.defaults(), progress=lambda f, label: seen.append(f))
    assert len(seen) >= 5
    assert seen == sorted(seen)
    assert seen[-1] == 1.0

import json
import math
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.jsnum import JsLcg, js_round, js_to_fixed
from course.tests.labs.reference import Generator, to_fixed_1


@pytest.mark.parametrize(
    ("value", "digits", "expected"),
    [
        (16.333333333333332, 1, "16.3"),
        (31.5, 1, "31.5"),
        (8.833333333333332, 1, "8.8"),
        (0.125, 2, "0.13"),  # exact tie: away from zero (Python's round gives 0.12)
        (2.5, 0, "3"),
        (-2.5, 0, "-3"),
        (1.005, 2, "1.00"),  # the double is just below 1.005
        (1.45, 1, "1.4"),  # the double is just below 1.45
        (0.05, 1, "0.1"),  # the double is just above 0.05
        (8.345, 2, "8.35"),  # the double is just above 8.345
        (-0.04, 1, "-0.0"),
        (-0.0, 1, "0.0"),
        (50.0, 1, "50.0"),
        (math.nan, 1, "NaN"),
        (math.inf, 1, "Infinity"),
        (1e21, 1, "1e+21"),
    ],
)
def test_to_fixed_matches_javascript(value, digits, expected):
    assert js_to_fixed(value, digits) == expected


@pytest.mark.processes
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
        min_size=20,
        max_size=20,
    )
)
def test_to_fixed_agrees_with_node(values):
    script = (
        "const xs = JSON.parse(process.argv[1]);"
        "console.log(JSON.stringify(xs.map((x) => [x.toFixed(1), x.toFixed(3)])));"
    )
    out = subprocess.run(
        ["node", "-e", script, json.dumps(values)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = json.loads(out)
    assert [[js_to_fixed(v, 1), js_to_fixed(v, 3)] for v in values] == expected


@settings(max_examples=300)
@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False))
def test_to_fixed_agrees_with_fraction_reference(value):
    assert float(js_to_fixed(value, 1)) == to_fixed_1(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.5, 1), (1.5, 2), (2.5, 3), (-2.5, -2), (-0.5, 0), (0.49999999999999994, 0)],
)
def test_js_round_rounds_halves_up(value, expected):
    assert js_round(value) == expected


def test_generator_needs_double_rounding_not_exact_integers():
    exact = 20250729
    exact = (exact * 1103515245 + 12345) % 2**31
    rng = JsLcg(20250729)
    rng.random()
    assert rng.state != exact  # the very first product already exceeds 2**53


@settings(max_examples=50)
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_generator_matches_integer_reference(seed):
    ours, reference = JsLcg(seed), Generator(seed)
    for _ in range(50):
        assert ours.random() == reference.next()

"""Hot key, HTTP caching, cache metrics: the course's tables, a reference, the CLI."""

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs import http_caching
from course.labs.harness.base import ParamError
from course.labs.registry import lab_get
from course.tests import reference_caching_b as ref
from course.tests.lab_results import (
    assert_charts_name_numeric_columns,
    assert_refused,
    columns,
    lab_json,
    records,
    rows,
    run,
)

HOT = "hot-key-and-stampede-effect"
HTTP = "http-caching"
METRICS = "cache-metrics"


# --- the course's printed output ------------------------------------------------------


def test_hot_key_defaults_reproduce_the_course():
    result = run(HOT)
    assert result["params"] == {
        "requests": 100,
        "origin_delay_ms": 30,
        "keys": 200,
        "lifetime": 100,
        "jitter": 40,
        "shard_requests": 1000,
        "shards": 4,
        "copies": [4, 8],
    }
    assert columns(result, "stampede") == [
        "strategy",
        "origin_calls",
        "pending_requests",
        "stale_responses",
    ]
    assert rows(result, "stampede") == [
        ["plain", 100, 100, 0],
        ["single-flight", 1, 100, 0],
        ["stale-while-revalidate", 1, 0, 100],
    ]
    # the course's duration column, measured on the virtual clock
    assert rows(result, "duration") == [
        ["plain", 30],
        ["single-flight", 30],
        ["stale-while-revalidate", 0],
    ]
    assert columns(result, "expiry") == [
        "lifetime",
        "expiry_steps",
        "highest_miss_in_step",
    ]
    assert rows(result, "expiry") == [
        ["fixed lifetime", 1, 200],
        ["jittered lifetime", 40, 9],
    ]
    assert columns(result, "shards") == [
        "distribution",
        "busiest_pct",
        "shard_0",
        "shard_1",
        "shard_2",
        "shard_3",
    ]
    assert rows(result, "shards") == [
        ["single key", 68.4, 102, 684, 108, 106],
        ["split into 4 copies", 40.8, 102, 234, 408, 256],
        ["split into 8 copies", 33.3, 102, 309, 333, 256],
    ]


def test_http_caching_defaults_reproduce_the_course():
    result = run(HTTP)
    assert result["params"] == {}
    assert columns(result, "validators") == ["request", "status", "downloaded_bytes"]
    assert [row[1:] for row in rows(result, "validators")] == [
        [200, 79],
        [304, 0],
        [304, 0],
        [200, 79],
    ]
    shared_minute = "public, max-age=60"
    shared_seconds = "public, max-age=5, stale-while-revalidate=30"
    own_only = "private, max-age=30"
    nowhere = "no-store"
    assert rows(result, "directives") == [
        ["/book/7", shared_minute],
        ["/branch/1/stock", shared_seconds],
        ["/member/4/history", own_only],
        ["/loan/approval", nowhere],
    ]
    assert rows(result, "headers") == [
        [
            "before update",
            '"0853c3f417fbfc00"',
            "Tue, 01 Jul 2025 09:00:00 GMT",
            "Accept-Language",
        ],
        [
            "after update",
            '"5633883a8bff3669"',
            "Wed, 02 Jul 2025 14:30:00 GMT",
            "Accept-Language",
        ],
    ]


def test_http_caching_matches_reference():
    result = run(HTTP)
    assert [row[1:] for row in rows(result, "validators")] == ref.http_validators()


def test_cache_metrics_defaults_reproduce_the_course():
    result = run(METRICS)
    assert result["params"] == {
        "requests": 2000,
        "seed": 20250729,
        "capacities": [4, 8, 16, 32, 64, 128],
        "breakdown_capacity": 64,
    }
    assert result["tables"]["capacity"] == {
        "columns": [
            "capacity",
            "hits",
            "misses",
            "hit_ratio_pct",
            "evictions",
            "origin_queries",
        ],
        "rows": [
            [4, 133, 1867, 6.7, 1863, 1867],
            [8, 289, 1711, 14.4, 1703, 1711],
            [16, 588, 1412, 29.4, 1396, 1412],
            [32, 1053, 947, 52.6, 915, 947],
            [64, 1851, 149, 92.5, 85, 149],
            [128, 1932, 68, 96.6, 0, 68],
        ],
    }
    assert columns(result, "namespaces") == [
        "namespace",
        "requests",
        "hits",
        "misses",
        "hit_ratio_pct",
    ]
    assert records(result, "namespaces") == [
        {"namespace": "book", "requests": 1380, "hits": 965, "misses": 415,
         "hit_ratio_pct": 69.9},
        {"namespace": "stock", "requests": 202, "hits": 189, "misses": 13,
         "hit_ratio_pct": 93.6},
        {"namespace": "list", "requests": 110, "hits": 84, "misses": 26,
         "hit_ratio_pct": 76.4},
        {"namespace": "history", "requests": 308, "hits": 19, "misses": 289,
         "hit_ratio_pct": 6.2},
    ]  # fmt: skip
    assert result["tables"]["totals"] == {
        "columns": [
            "request_hit_ratio_pct",
            "byte_hit_ratio_pct",
            "hit_bytes",
            "miss_bytes",
            "origin_queries",
        ],
        "rows": [[62.8, 51.7, 283673, 264714, 743]],
    }
    assert result["tables"]["without_history"] == {
        "columns": ["book_hit_ratio_pct", "evictions", "origin_queries"],
        "rows": [[90.7, 77, 449]],
    }
    # "(previously: 679)": the eviction count with histories cached
    assert rows(result, "evictions") == [["yes", 679], ["no", 77]]


# --- other values against the independent reference ---------------------------------

HOT_DEFAULTS: dict[str, Any] = {
    "requests": 100,
    "origin_delay_ms": 30,
    "keys": 200,
    "lifetime": 100,
    "jitter": 40,
    "shard_requests": 1000,
    "shards": 4,
    "copies": [4, 8],
}


def check_hot_key(params: dict[str, Any]) -> None:
    full = {**HOT_DEFAULTS, **params}
    result = run(HOT, **full)
    expected = ref.hot_key(**full)
    for name in ("stampede", "duration", "expiry", "shards"):
        assert rows(result, name) == expected[name], name


@pytest.mark.parametrize(
    "params",
    [
        {"requests": 0},
        {"requests": 1, "origin_delay_ms": 0},
        {"requests": 7, "origin_delay_ms": 250},
        {"keys": 1, "jitter": 0},
        {"keys": 1000, "lifetime": 5, "jitter": 7},
        {"jitter": 1},
        {"shards": 1, "copies": [1]},
        {"shards": 7, "copies": [2, 3, 16], "shard_requests": 37},
        {"shards": 16, "copies": [64], "shard_requests": 5000},
    ],
)
def test_hot_key_matches_reference_for_other_values(params):
    check_hot_key(params)


@settings(max_examples=25, deadline=None)
@given(
    requests=st.integers(0, 60),
    origin_delay_ms=st.integers(0, 10_000),
    keys=st.integers(1, 400),
    lifetime=st.integers(1, 1000),
    jitter=st.integers(0, 500),
    shard_requests=st.integers(1, 600),
    shards=st.integers(1, 12),
    copies=st.lists(st.integers(1, 40), min_size=1, max_size=3),
)
def test_hot_key_matches_reference_property(**params):
    check_hot_key(params)


def test_stampede_runs_on_a_virtual_clock():
    started = time.monotonic()
    result = run(HOT, origin_delay_ms=3_600_000, requests=50)
    assert time.monotonic() - started < 5
    assert rows(result, "duration")[0] == ["plain", 3_600_000]
    assert rows(result, "stampede")[0] == ["plain", 50, 50, 0]


def check_metrics(params: dict[str, Any]) -> None:
    full = {
        "requests": 2000,
        "seed": 20250729,
        "capacities": [4, 8, 16, 32, 64, 128],
        "breakdown_capacity": 64,
        **params,
    }
    result = run(METRICS, **full)
    expected = ref.cache_metrics(**full)
    for name in ("capacity", "namespaces", "totals", "without_history"):
        assert rows(result, name) == expected[name], name


@pytest.mark.parametrize(
    "params",
    [
        {"requests": 0},
        {"requests": 1, "capacities": [1]},
        {"requests": 900, "seed": 0, "breakdown_capacity": 1},
        {"seed": 2**31 - 1, "capacities": [2, 68, 69, 300]},
        {"requests": 3000, "seed": 42, "breakdown_capacity": 268},
    ],
)
def test_cache_metrics_matches_reference_for_other_values(params):
    check_metrics(params)


@settings(max_examples=15, deadline=None)
@given(
    requests=st.integers(0, 700),
    seed=st.integers(0, 2**31 - 1),
    capacities=st.lists(st.integers(1, 150), min_size=1, max_size=3),
    breakdown_capacity=st.integers(1, 300),
)
def test_cache_metrics_matches_reference_property(**params):
    check_metrics(params)


def test_cache_metrics_without_requests_prints_null_ratios():
    result = run(METRICS, requests=0, capacities=[4])
    assert rows(result, "capacity") == [[4, 0, 0, None, 0, 0]]
    assert rows(result, "totals") == [[None, None, 0, 0, 0]]
    assert all(row[4] is None for row in rows(result, "namespaces"))


# --- the validator functions (reused by library/cache/http.py later) ----------------

TAG = '"0853c3f417fbfc00"'
MODIFIED = datetime(2025, 7, 1, 9, 0, tzinfo=UTC)


def test_etag_is_the_quoted_sha256_prefix_of_the_body():
    names = ["bookId", "title", "author", "on_shelf"]
    values = [7, "Sand: Borges Selection", "Anthology", 3]
    body = http_caching.json_text(dict(zip(names, values, strict=True)))
    assert len(body.encode()) == 79
    assert http_caching.etag_for(body) == TAG
    assert http_caching.etag_for(body.encode()) == TAG


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, False),
        ({"If-None-Match": TAG}, True),
        ({"if-none-match": TAG}, True),
        ({"If-None-Match": f'"other", {TAG}'}, True),
        ({"If-None-Match": f'"a,b" ,W/{TAG}'}, True),  # weak comparison
        ({"If-None-Match": '"other"'}, False),
        ({"If-None-Match": "*"}, True),
        ({"If-None-Match": "0853c3f417fbfc00"}, False),  # unquoted is no tag
        # If-None-Match present: the date is not consulted, even when it would match
        (
            {
                "If-None-Match": '"other"',
                "If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT",
            },
            False,
        ),
        ({"If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT"}, True),
        ({"If-Modified-Since": "Wed, 02 Jul 2025 00:00:00 GMT"}, True),
        ({"If-Modified-Since": "Tue, 01 Jul 2025 08:59:59 GMT"}, False),
        ({"If-Modified-Since": "Tuesday, 01-Jul-25 09:00:00 GMT"}, True),  # RFC 850
        ({"If-Modified-Since": "not a date"}, False),
    ],
)
def test_is_not_modified_follows_the_conditional_rules(headers, expected):
    assert http_caching.is_not_modified(headers, TAG, MODIFIED) is expected


def test_if_modified_since_needs_a_last_modified_date():
    headers = {"If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT"}
    assert http_caching.is_not_modified(headers, TAG, None) is False


def test_last_modified_compares_whole_seconds():
    later_in_second = datetime(2025, 7, 1, 9, 0, 0, 700_000, tzinfo=UTC)
    headers = {"If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT"}
    assert http_caching.is_not_modified(headers, None, later_in_second) is True


def test_not_modified_answer_repeats_validators_without_a_body():
    api = http_caching.LibraryApi()
    first = api.handle("GET", "/book/7")
    again = api.handle("GET", "/book/7", {"If-None-Match": first.headers["etag"]})
    assert (again.status, again.body) == (304, b"")
    assert again.headers["etag"] == first.headers["etag"]
    assert again.headers["cache-control"] == "public, max-age=60"
    assert api.handle("GET", "/nowhere").status == 404


# --- progress, charts and the command line ------------------------------------------


@pytest.mark.parametrize("slug", [HOT, HTTP, METRICS])
def test_progress_is_reported_in_order(slug):
    seen: list[float] = []
    lab = lab_get(slug)
    lab.run(lab.defaults(), progress=lambda fraction, label: seen.append(fraction))
    assert len(seen) >= 4
    assert seen == sorted(seen)
    assert seen[-1] == 1.0


@pytest.mark.parametrize("slug", [HOT, HTTP, METRICS])
def test_every_chart_names_numeric_columns(slug):
    assert_charts_name_numeric_columns(slug)


@pytest.mark.parametrize(
    ("slug", "table", "first_row"),
    [
        (HOT, "stampede", ["plain", 100, 100, 0]),
        (HTTP, "directives", ["/book/7", "public, max-age=60"]),
        (METRICS, "totals", [62.8, 51.7, 283673, 264714, 743]),
    ],
)
def test_lab_json_from_the_command_line(slug, table, first_row):
    assert lab_json(slug)["tables"][table]["rows"][0] == first_row


def test_command_sets_shards_and_copies():
    shards = lab_json(HOT, "--set", "shards=3", "--set", "copies=2,5")["tables"][
        "shards"
    ]
    assert shards["columns"][2:] == ["shard_0", "shard_1", "shard_2"]
    assert [row[0] for row in shards["rows"]] == [
        "single key",
        "split into 2 copies",
        "split into 5 copies",
    ]
    assert all(sum(row[2:]) == 1000 for row in shards["rows"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([HOT, "--set", "shards=0"], "shards: must be at least 1"),
        ([HOT, "--set", "copies=0"], "copies: must be at least 1"),
        ([HOT, "--set", "copies=4,x"], "'x' is not a whole number"),
        ([HOT, "--set", "keys=0"], "keys: must be at least 1"),
        ([HOT, "--set", "shard_requests=-1"], "shard_requests: must be at least 0"),
        ([HOT, "--set", "origin_delay_ms=-1"], "must be at least 0"),
        ([HOT, "--set", "requests=99999"], "requests: must be at most"),
        ([HTTP, "--set", "requests=1"], "has no parameter 'requests'"),
        ([METRICS, "--set", "capacities=-1"], "capacities: must be at least 0"),
        ([METRICS, "--set", "capacities=" + ",".join("1" * 13)], "at most 12 values"),
        ([METRICS, "--set", "breakdown_capacity=-1"], "must be at least 0"),
        ([METRICS, "--set", "seed=2147483648"], "seed: must be at most"),
        ([METRICS, "--set", "requests=-1"], "requests: must be at least 0"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(*args, needle=needle)


def test_stored_params_are_checked_by_type():
    with pytest.raises(ParamError):
        lab_get(METRICS).validate({"capacities": [4, "8"]})
    with pytest.raises(ParamError):
        lab_get(HOT).validate({"shards": 2.0})

"""What every lab shares: the registry's shape, the parameters' refusals, progress,
charts, the command's JSON and the lesson page. Each lab's own tables are in
``test_<lab>.py`` beside this file; the live parts in their sandboxes in
``course/tests/test_sandboxed_labs.py``, every parameter's boundaries in
``course/tests/test_lab_boundaries.py``.
"""

from __future__ import annotations

import datetime
import importlib
import pkgutil
import types

import pytest

import course.labs
from course.labs.cache_key_design.live import LIVE_OTHER, LIVE_OWNER, LIVE_QUERY
from course.labs.cache_layers.live import live_pages
from course.labs.cache_layers.model import STREAM_MEMBERS
from course.labs.cache_metrics.live import LiveCatalogue
from course.labs.harness.base import LivePart, ParamError, clean_cell
from course.labs.harness.dataset_shape import MEMBER_COUNT
from course.labs.http_caching.live import LIVE_BOOK_ID
from course.labs.polling_approaches import LAB as POLLING_LAB
from course.labs.rationale_for_asynchronous_processing.live import live_loans
from course.labs.registry import LABS, UnknownLab, lab_get, package_name
from course.labs.server_sent_events import LAB as SSE_LAB
from course.lessons import LESSONS, lesson_get
from course.tests.labs.lab_results import (
    assert_charts_name_numeric_columns,
    assert_refused,
    lab_form_page,
    lab_json,
)
from course.tests.labwork import run_waiting
from jobs.models import JobStatus
from library import selectors
from library.models import Book
from library.seed import seed_library

ALL = sorted(LABS)
HOT = "hot-key-and-stampede-effect"


# --- the registry ---------------------------------------------------------------------


def test_every_lab_belongs_to_a_lesson_and_there_are_25_lessons():
    assert len(LESSONS) == 25
    assert {lab.slug for lab in LABS.values()} <= {lesson.slug for lesson in LESSONS}
    lesson = lesson_get("cache-layers")
    assert lesson is not None
    assert lesson.url.endswith("/asynchronous-processing/cache-layers")


@pytest.mark.parametrize("slug", ALL)
def test_every_lab_is_its_lessons_package_with_both_parts(slug):
    lab = LABS[slug]
    assert lab.model.__module__ == f"{package_name(slug)}.model"
    assert isinstance(lab.live, LivePart)
    assert lab.live.measure.__module__ == f"{package_name(slug)}.live"


def test_the_labs_are_found_by_name():
    assert lab_get("polling-approaches") is POLLING_LAB
    assert lab_get("server-sent-events") is SSE_LAB


def test_a_lab_package_never_shadows_its_submodules():
    """``course.labs.<lab>.model`` is the module: ``__init__`` imports it as one."""
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


# --- parameters -----------------------------------------------------------------------


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
        ("cache-strategies", "hot_books", "61", "hot_books: must be at most 60"),
        ("cache-strategies", "hot_books", "0", "hot_books: must be at least 1"),
        ("cache-strategies", "flush_every", "0", "flush_every: must be at least 1"),
        ("cache-strategies", "write_ratio", "1.5", "write_ratio: must be at most 1"),
        ("cache-strategies", "write_ratio", "-0.1", "write_ratio: must be at least 0"),
        ("cache-strategies", "ops", "-1", "ops: must be at least 0"),
        ("cache-strategies", "seed", "x", "seed: 'x' is not a whole number"),
        ("invalidation", "delays", "5,0", "delays: must be at least 1"),
        ("invalidation", "lifetimes", "-1", "lifetimes: must be at least 0"),
        (
            "invalidation",
            "lifetimes",
            "1,2,3,4,5,6,7,8,9",
            "lifetimes: at most 8 values",
        ),
        ("cache-key-design", "requests", "-1", "requests: must be at least 0"),
        ("cache-key-design", "requests", "1000001", "requests: must be at most 100000"),
    ],
)
def test_bad_values_are_rejected_with_one_line(slug, name, text, reason):
    with pytest.raises(ParamError) as info:
        lab_get(slug).resolve({name: text})
    message = str(info.value)
    assert message.startswith(reason)
    assert "\n" not in message


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([HOT, "--set", "shards=0"], "shards: must be at least 1"),
        ([HOT, "--set", "copies=0"], "copies: must be at least 1"),
        ([HOT, "--set", "copies=4,x"], "'x' is not a whole number"),
        ([HOT, "--set", "keys=0"], "keys: must be at least 1"),
        ([HOT, "--set", "shard_requests=-1"],
         "shard_requests: must be at least 0"),
        ([HOT, "--set", "origin_delay_ms=-1"],
         "must be at least 0"),
        ([HOT, "--set", "requests=99999"],
         "requests: must be at most"),
        (["http-caching", "--set", "requests=1"], "has no parameter 'requests'"),
        (["cache-metrics", "--set", "capacities=-1"], "capacities: must be at least 0"),
        (["cache-metrics", "--set", "capacities=" + ",".join("1" * 13)],
         "at most 12 values"),
        (["cache-metrics", "--set", "breakdown_capacity=-1"], "must be at least 0"),
        (["cache-metrics", "--set", "seed=2147483648"], "seed: must be at most"),
        (["cache-metrics", "--set", "requests=-1"], "requests: must be at least 0"),
        (["rationale-for-asynchronous-processing", "--set", "success_probability=1.5"],
         "must be at most 1"),
        (["rationale-for-asynchronous-processing", "--set", "success_probability=-0.1"],
         "must be at least 0"),
        (["delivery-semantics", "--set", "messages=-1"], "must be at least 0"),
        (["delivery-semantics", "--set", "crashes=3,x"], "'x' is not a whole number"),
        (["delivery-semantics", "--set", "crashes=0"], "must be at least 1"),
        (["dead-letter-queues", "--set", "threshold=0"], "must be at least 1"),
        (["dead-letter-queues", "--set", "thresholds=0"], "must be at least 1"),
        (["poison-messages-and-retry", "--set", "bucket_ms=0"], "must be at least 1"),
        (["poison-messages-and-retry", "--set", "consumers=0"], "must be at least 1"),
        (["poison-messages-and-retry", "--set", "base_ms=-5"], "must be at least 0"),
        (["poison-messages-and-retry", "--set", "consumers=10000", "--set",
          "attempts=50"], "at most"),
        (["poison-messages-and-retry", "--set", "seed=2147483648"], "must be at most"),
        (["publish-subscribe", "--set", "rounds=0"], "must be at least 1"),
        (["publish-subscribe", "--set", "rounds=501"], "must be at most 500"),
        (["publish-subscribe", "--set", "per_round=-1"], "must be at least 0"),
        (["publish-subscribe", "--set", "budget=six"], "'six' is not a whole number"),
        (["publish-subscribe", "--set", "slow_duration=1.5"], "not a whole number"),
        (["publish-subscribe", "--set", "subscribers=3"],
         "has no parameter 'subscribers'"),
        (["streams-vs-queues", "--set", "keep=-1"], "must be at least 0"),
        (["streams-vs-queues", "--set", "keep="], "is not a whole number"),
        (["backpressure", "--set", "capacity=0"], "must be at least 1"),
        (["backpressure", "--set", "window_ms=x"], "is not a whole number"),
        (["load-shedding", "--set", "max_concurrent=0"], "must be at least 1"),
    ],
)  # fmt: skip
def test_bad_values_exit_2_with_one_line(args, needle):
    assert_refused(*args, needle=needle)


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


# --- a model run ----------------------------------------------------------------------


# The models that report progress step by step, and how many steps at least.
STEPS = {
    "cache-layers": 5,
    "cache-strategies": 4,
    "invalidation": 4,
    "cache-key-design": 4,
    "hot-key-and-stampede-effect": 4,
    "http-caching": 4,
    "cache-metrics": 4,
}


@pytest.mark.parametrize("slug", sorted(STEPS))
def test_progress_is_reported_in_order(slug):
    seen: list[float] = []
    lab = lab_get(slug)
    lab.run(lab.defaults(), progress=lambda fraction, label: seen.append(fraction))
    assert len(seen) >= STEPS[slug]
    assert seen == sorted(seen)
    assert seen[-1] == 1.0


@pytest.mark.parametrize(
    "slug",
    [
        "cache-strategies",
        "invalidation",
        "cache-key-design",
        "hot-key-and-stampede-effect",
        "http-caching",
        "cache-metrics",
        "rationale-for-asynchronous-processing",
        "delivery-semantics",
        "dead-letter-queues",
        "poison-messages-and-retry",
        "publish-subscribe",
        "streams-vs-queues",
        "backpressure",
        "load-shedding",
    ],
)
def test_every_chart_names_numeric_columns_the_model_produces(slug):
    assert_charts_name_numeric_columns(slug)


@pytest.mark.parametrize(
    ("args", "table", "first_row"),
    [
        ([HOT], "stampede", ["plain", 100, 100, 0]),
        (["http-caching"], "directives", ["/book/7", "public, max-age=60"]),
        (["cache-metrics"], "totals", [62.8, 51.7, 283673, 264714, 743]),
        (["rationale-for-asynchronous-processing"], "summary",
         [467, 12, 0.974, 2.1, 83.3, 0.99501, 0.998]),
        (["delivery-semantics"], "modes", ["at-most-once", 12, 9, 3, 0]),
        (["dead-letter-queues"], "retry", ["unbounded", 8, 34, 18, 16, 2, 0]),
        (["poison-messages-and-retry"], "jitter", ["no jitter", 800, 200, 4, 75]),
        (["publish-subscribe"], "slow_subscriber", [1, "4/0", "4/0", "2/2"]),
        (["publish-subscribe"], "late_subscriber", [5, 3]),
        (["streams-vs-queues"], "storage", ["single log", 1, 352]),
        (["streams-vs-queues"], "retention", [6, 6, 4]),
        (["backpressure", "--set", "capacity=50"], "policies",
         ["unbounded", 1000, 600, 0, 400, 400, 4000, 0]),
        (["load-shedding", "--set", "max_queue=0"], "latency",
         ["unbounded", 200, 3, 2]),
    ],
)  # fmt: skip
def test_lab_json_from_the_command_line(args, table, first_row):
    assert lab_json(*args)["tables"][table]["rows"][0] == first_row


# --- the lesson page ------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "slug",
    [
        "rationale-for-asynchronous-processing",
        "delivery-semantics",
        "dead-letter-queues",
        "poison-messages-and-retry",
        "publish-subscribe",
        "streams-vs-queues",
    ],
)
def test_lesson_page_offers_the_lab_form(client, slug):
    assert "not built yet" not in lab_form_page(client, slug)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("slug", "form", "table", "cell"),
    [
        (
            "publish-subscribe",
            {"rounds": "3", "slow_duration": "2"},
            "slow_subscriber",
            "9/3",
        ),
        ("streams-vs-queues", {"keep": "2"}, "retention", "8"),
    ],
)
def test_a_run_from_the_page_shows_its_tables(
    client, redis_client, django_capture_on_commit_callbacks, slug, form, table, cell
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/course/{slug}/run", form)
    assert response.status_code == 303
    run_waiting()  # what a lab worker does, in this process
    job = JobStatus.objects.get()
    assert job.state == "done", job.error
    sets = [arg for name, value in form.items() for arg in ("--set", f"{name}={value}")]
    assert job.result == lab_json(slug, *sets)
    html = client.get(response["Location"]).content.decode()
    for name in job.result["tables"]:
        assert f"<code>{name}</code>" in html
    assert f"<td>{cell}</td>" in html


# --- the live parts on the demo library -----------------------------------------------


@pytest.mark.django_db
def test_live_parts_find_the_rows_they_read_in_the_demo_library():
    seed_library(today=datetime.date(2026, 3, 16))

    catalogue = LiveCatalogue.load()  # 60 books, 4 branches, 200 members
    assert len(catalogue.members) == MEMBER_COUNT
    pages = live_pages(STREAM_MEMBERS)
    assert len(pages.branches) == 4
    assert len(live_loans()) == 3
    assert Book.objects.filter(pk=LIVE_BOOK_ID).exists()
    found = {
        branch: {
            b.pk
            for b in selectors.branch_books_page(
                branch_id=branch, query=LIVE_QUERY
            ).object_list
        }
        for branch in (LIVE_OWNER, LIVE_OTHER)
    }
    assert found[LIVE_OWNER]
    assert found[LIVE_OTHER]
    assert not found[LIVE_OWNER] & found[LIVE_OTHER]

"""The cache-key-design lab: its model against the course and an independent reference,
its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.processes import children
from course.tests.labs import reference_cache_key_design as ref
from course.tests.labs.lab_results import (
    live_tables,
    make_branches,
    records,
    rows,
    run,
)
from library.cache.keys import cache_key
from library.models import Book
from library.seed import seed_library

KEY_DESIGN = "cache-key-design"


def generated(operation: str, tenant: str, **criteria: Any) -> str:
    return cache_key(
        namespace="library",
        operation=operation,
        tenant=tenant,
        generation=4,
        criteria=criteria,
    )


def test_cache_key_design_keys_come_from_the_system_generator():
    result = run(KEY_DESIGN)
    keys = [key for _, key in rows(result, "keys")]
    assert keys == [
        generated("search", "branch-2", title="Sand", author="Borges"),
        generated("search", "branch-2", title="Sand: Borges", author=""),
        generated("list", "branch-2", page=1),
        generated("list", "branch-3", page=1),
        generated("search", "branch-1", author="Atay", title="The Disconnected"),
        generated("search", "branch-1", title="The Disconnected", author="Atay"),
        keys[6],
    ]
    # the printed forms, glued from pieces so the test does not quote the lesson
    head = "library:s1:g4:t"
    assert keys[1] == head + "branch-2:search:title=Sand%3A%20Borges"
    assert keys[3] == head + "branch-3:list:page=1"
    assert keys[6] == head + "branch-1:search:c_648d4755bc125b8e"
    assert rows(result, "checks") == [
        ["both orders give one key", "yes"],
        ["length of the summarised key", 49],
    ]


def test_cache_key_design_collision_and_leak():
    result = run(KEY_DESIGN)
    found = [(r["key"], r["source"], r["result"]) for r in records(result, "collision")]
    sand, selection = "The Book of Sand", "Sand: Borges Selection"
    branch_2, branch_3 = "The Book of Sand, Yaban", "Silent House, Motherland Hotel"
    assert found == [
        ("search:Sand:Borges", "origin", sand),
        ("search:Sand:Borges", "cache", sand),  # B is handed A's answer
        (
            generated("search", "branch-2", title="Sand", author="Borges"),
            "origin",
            sand,
        ),
        (generated("search", "branch-2", title="Sand: Borges"), "origin", selection),
        ("list:page:1", "origin", branch_2),
        ("list:page:1", "cache", branch_2),  # branch 3 is shown branch 2's shelf
        (generated("list", "branch-2", page=1), "origin", branch_2),
        (generated("list", "branch-3", page=1), "origin", branch_3),
    ]
    assert rows(result, "leak") == [[2, 2, branch_2]]


def test_cache_key_design_cardinality_reproduces_the_course():
    result = run(KEY_DESIGN)
    assert result["params"] == {"requests": 400}
    assert result["tables"]["cardinality"]["columns"] == [
        "key_form", "hits", "misses", "ratio_pct", "wrong", "entries",
    ]  # fmt: skip
    assert records(result, "cardinality") == [
        {"key_form": "correct (tenant + criteria)", "hits": 394, "misses": 6,
         "ratio_pct": 98.5, "wrong": 0, "entries": 6},
        {"key_form": "extra field (request id)", "hits": 0, "misses": 400,
         "ratio_pct": 0, "wrong": 0, "entries": 400},
        {"key_form": "missing field (no tenant)", "hits": 398, "misses": 2,
         "ratio_pct": 99.5, "wrong": 200, "entries": 2},
    ]  # fmt: skip


@pytest.mark.parametrize("requests", [0, 1, 5, 6, 7, 32, 800, 999, 12_000])
def test_cache_key_design_cardinality_matches_reference(requests):
    result = run(KEY_DESIGN, requests=requests)
    assert rows(result, "cardinality") == ref.cardinality(requests)


@settings(max_examples=30, deadline=None)
@given(requests=st.integers(0, 3000))
def test_cache_key_design_cardinality_property(requests):
    assert rows(run(KEY_DESIGN, requests=requests), "cardinality") == (
        ref.cardinality(requests)
    )


def test_no_requests_gives_null_ratios():
    table = rows(run(KEY_DESIGN, requests=0), "cardinality")
    assert [row[3] for row in table] == [None, None, None]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_cache_key_design_live_leaks_only_with_the_glued_key(redis_client):
    branches = make_branches()
    for number in range(1, 25):
        Book.objects.create(
            title=f"Book {number}", author="Anon",
            branch=branches[number % 3], on_shelf=1,
        )  # fmt: skip

    tables = live_tables("cache-key-design")

    tenants = rows(tables, "live_tenants")
    assert tables["live_tenants"]["columns"] == [
        "case", "key", "branch_asked", "branch_served", "result",
    ]  # fmt: skip
    assert [(r[2], r[3], r[4]) for r in tenants] == [
        (2, 2, "correct"),
        (3, 2, "leak"),  # branch 3 is served branch 2's books
        (2, 2, "correct"),
        (3, 3, "correct"),
        (2, 2, "correct"),
        (3, 3, "correct"),
    ]
    assert tenants[0][1] == tenants[1][1]  # one glued key for both branches
    assert tenants[2][1] != tenants[3][1]  # the generator's keys differ per tenant
    assert "tbranch-3" in tenants[3][1]
    assert "GET /branches/3/books/" in tenants[5][0]
    [[served, foreign, _titles]] = rows(tables, "live_leak")
    assert served == foreign > 0
    # the naive demo keys are deleted at the end
    assert not list(redis_client.scan_iter(match="lab-*:search:*"))
    assert children(os.getpid()) == []


TODAY = datetime.date(2026, 3, 16)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_cache_key_design_live_leaks_only_with_the_glued_key_on_real_titles(
    redis_client,
):
    seed_library(today=TODAY)

    tables = live_tables("cache-key-design")

    tenants = rows(tables, "live_tenants")
    assert [(r[2], r[3], r[4]) for r in tenants] == [
        (2, 2, "correct"),
        (3, 2, "leak"),
        (2, 2, "correct"),
        (3, 3, "correct"),
        (2, 2, "correct"),
        (3, 3, "correct"),
    ]
    [[served, foreign, titles]] = rows(tables, "live_leak")
    assert served == foreign > 0
    assert "Book" in titles
    assert children(os.getpid()) == []

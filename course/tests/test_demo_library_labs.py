"""The labs' live parts run on the demo library and still reach the model's counts.

A learner runs the live parts on the installation ``make run`` seeded, so the rows
they find are the demo library's real titles, not the course's "Book n". The counts
that depend only on the workload must not move with the catalogue.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import pytest

from course.labs import cache_metrics
from course.labs.cache_key_design.live import LIVE_OTHER, LIVE_OWNER, LIVE_QUERY
from course.labs.cache_layers.live import _live_pages
from course.labs.cache_layers.model import STREAM_MEMBERS
from course.labs.cache_metrics.live import LiveCatalogue
from course.labs.harness import live as harness
from course.labs.harness.base import Tables
from course.labs.harness.dataset_shape import MEMBER_COUNT
from course.labs.http_caching.live import LIVE_BOOK_ID
from course.labs.rationale_for_asynchronous_processing.live import _live_loans
from course.labs.registry import lab_get
from library import selectors
from library.models import Book
from library.seed import seed_library

TODAY = datetime.date(2026, 3, 16)


def live_tables(slug: str) -> Tables:
    lab = lab_get(slug)
    return lab.run(lab.defaults(), live=True)["tables"]


def rows(tables: Tables, name: str) -> list[list[Any]]:
    return tables[name]["rows"]


@pytest.mark.django_db
def test_live_parts_find_the_rows_they_read_in_the_demo_library():
    seed_library(today=TODAY)

    catalogue = LiveCatalogue.load()  # 60 books, 4 branches, 200 members
    assert len(catalogue.members) == MEMBER_COUNT
    pages = _live_pages(STREAM_MEMBERS)
    assert len(pages.branches) == 4
    assert len(_live_loans()) == 3
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
    assert harness.child_pids(os.getpid()) == []


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_cache_layers_live_reaches_the_models_counts_on_the_demo_library(
    redis_client,
):
    seed_library(today=TODAY)

    tables = live_tables("cache-layers")

    assert rows(tables, "live_repetition") == rows(tables, "repetition")
    assert rows(tables, "live_chain") == rows(tables, "chain")
    assert harness.child_pids(os.getpid()) == []


@pytest.mark.django_db(transaction=True)
def test_cache_metrics_live_counts_equal_the_model_on_the_demo_library(
    redis_client,
):
    seed_library(today=TODAY)
    lab = cache_metrics.LAB

    tables = lab.run(lab.defaults(), live=True)["tables"]

    assert [r[:6] for r in rows(tables, "live_capacity")] == rows(tables, "capacity")
    assert rows(tables, "live_namespaces") == rows(tables, "namespaces")
    assert rows(tables, "live_without_history") == rows(tables, "without_history")
    # The bytes are the real rows' sizes: the demo titles are longer than "Book n".
    [[_, byte_pct, hit_bytes, miss_bytes, _]] = rows(tables, "live_totals")
    assert hit_bytes > 0
    assert byte_pct == round(hit_bytes / (hit_bytes + miss_bytes) * 100, 1)

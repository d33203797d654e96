"""Every lab's live part, run as a learner runs it: in its sandbox, the operator's
system untouched.

The live parts' own tests (test_live_*.py and the lab tests) check their counts in
this process; here each of the 25 runs the way the site and ``lab --live`` run it,
in a sandbox (course.sandbox), with the operator's library loaded and its cache
warm, and everything the operator could look at is compared before and after.
Run on SQLite only: the sandbox's PostgreSQL path (a database made from a template)
is proven by test_sandbox.py, and the live parts are the same on both.
"""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from django.db import connection
from django.test import Client

from course.challenges.expr import ExprError, NoValue, evaluate
from course.challenges.grading import model_runner
from course.challenges.live import live_context
from course.challenges.recorded import live_only, recordings_of
from course.challenges.spec import lesson_challenges
from course.labs.harness.base import Tables
from course.labs.registry import LABS
from course.sandbox import lab_run_sandboxed, labs_dir
from library.seed import seed_library
from tests.snapshots import operator_snapshot

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # Each run is a child process in a sandbox; SQLite's run is the one that counts.
    pytest.mark.processes,
    pytest.mark.each_database,
    pytest.mark.skipif(
        connection.vendor != "sqlite", reason="the sandboxes' SQLite run proves it"
    ),
]
LIVE = sorted(slug for slug, lab in LABS.items() if lab.live is not None)


def test_every_lab_has_a_live_part_here():
    assert len(LIVE) == 25


@pytest.mark.parametrize("slug", LIVE)
def test_the_live_part_runs_in_its_sandbox_and_changes_nothing_of_ours(
    slug, redis_client
):
    seed_library()
    # A warm cache and its metrics, which a live run must not touch.
    assert Client().get("/branches/1/books/").status_code == 200
    before = operator_snapshot(redis_client)
    lab = LABS[slug]

    result = lab_run_sandboxed(lab, lab.resolve({}), live=True)

    assert any(name.startswith("live_") for name in result["tables"]), slug
    assert operator_snapshot(redis_client) == before
    assert not own_sandboxes()  # removed (another suite's may come and go meanwhile)
    assert live_checks_still_read(slug, result["tables"]) == []


def live_checks_still_read(slug: str, tables: Tables) -> list[str]:
    """The lesson's challenge live checks were proven on recorded runs
    (``course.challenges.recorded``): this run must still produce the recorded
    tables with their columns, and every live condition must read it."""
    problems: list[str] = []
    fresh = live_only(tables)
    lab = LABS[slug]
    for cid, recording in recordings_of(slug).items():
        for name, recorded in recording.solution.tables.items():
            if name not in fresh:
                problems.append(f"{cid}: the live part no longer makes {name}")
            elif fresh[name]["columns"] != recorded["columns"]:
                problems.append(f"{cid}: {name} has other columns than recorded")
    params = lab.defaults()
    context = live_context(lab, params, tables, model_runner(lab))
    for challenge in lesson_challenges(slug):
        for condition in challenge.live:
            try:
                evaluate(condition, context)
            except NoValue:
                pass
            except ExprError as error:
                problems.append(f"{challenge.id}: {condition.source!r}: {error}")
    return problems


def own_sandboxes() -> list[str]:
    """Return the sandboxes this process owns that are still on disk."""
    owned = []
    for manifest in labs_dir().glob("*/sandbox.json"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(manifest.read_text())["owner_pid"] == os.getpid():
                owned.append(manifest.parent.name)
    return owned

"""Fixtures shared by every app's tests, and where the process tests run.

The library's rows come from here, one set for every app: ``library`` is a small
library (two branches, three books, a member; ``loan`` adds an open loan), and
``branch``, ``book``, ``member`` and ``other_member`` are the one branch and book
and the two members with accounts that most library tests need. A test that needs
rows of another shape (a workload of hundreds of books, a branch of its own) makes
them itself.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from django.conf import settings
from django.db import connections

from library.models import Book, Branch, Loan, Member
from realtime.polling import db_release
from tests.people import account

# Tests that start real processes or a browser prove a behaviour once, on the
# production database, unless marked ``each_database`` (what they prove differs by
# database). LIBRARY_TEST_PROCESSES=all runs every one of them on SQLite as well.
ONCE_ON = "django.db.backends.postgresql"


def _runs_here(item: pytest.Item, engine: str) -> bool:
    if not (item.get_closest_marker("processes") or item.get_closest_marker("browser")):
        return True
    return engine == ONCE_ON or item.get_closest_marker("each_database") is not None


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if os.environ.get("LIBRARY_TEST_PROCESSES", "once") == "all":
        return
    engine = settings.DATABASES["default"]["ENGINE"]
    kept = [item for item in items if _runs_here(item, engine)]
    left = [item for item in items if not _runs_here(item, engine)]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"{len(left)} process/browser tests left to the PostgreSQL run "
                "(LIBRARY_TEST_PROCESSES=all runs them here too)"
            )


@pytest.fixture(autouse=True)
def _channel_layer_per_test() -> Iterator[None]:
    """Give each test a channel layer of its own.

    The layer is a process-wide object whose receive lock belongs to the event loop
    that first received on it; a consumer still receiving when its test's loop closed
    leaves that lock held and bound to a dead loop, and the next test's sockets fail
    with "bound to a different event loop". Building the layer again per test cuts
    that tie (the prefix, and so the groups in Redis, stay this run's).
    """
    yield
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _lesson_pages_per_test() -> Iterator[None]:
    """Start each test without the lesson pages an earlier test had stored, nor
    the headers the explorable answers' front captured.

    They are kept in this process's memory (``course.lesson_cache``,
    ``course.explore_front``), and a test may change what a page shows (settings,
    rows, the lesson files themselves).
    """
    from course.explore_front import captured_clear
    from course.lesson_cache import shared_pages_clear

    shared_pages_clear()
    captured_clear()
    yield
    shared_pages_clear()
    captured_clear()


@pytest.fixture(scope="session", autouse=True)
def _executor_connections_closed(django_db_setup: None) -> Iterator[None]:
    """Close what still holds a connection before the test databases go.

    On PostgreSQL a connection left open kept the test database from being dropped
    at the end ("is being accessed by other users"). Two kinds were left: the one of
    asgiref's executor thread, where an async test's ``sync_to_async`` calls run
    (no request wraps them, so nobody closes it), and the ones of threads that have
    ended, kept from being freed by a reference cycle until a collection. Torn down
    before ``django_db_setup``, which drops the databases.
    """
    yield
    asyncio.run(sync_to_async(connections.close_all)())
    db_release()  # the realtime pool's threads keep theirs
    gc.collect()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A client on the tests' Redis database, emptied before and after the test."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def browser():
    """A headless Chromium (Debian's) for the duration of one test."""
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()
        # Playwright runs its event loop in this thread, and while it does asgiref
        # treats the thread as async: Django's connections then live in this
        # context, not in the thread, so the tests' queries between browser steps
        # opened one of their own, which nothing else closed (it kept PostgreSQL
        # from dropping the test database at the end). Closed here, while that loop
        # still runs, so with Django's guard lifted as those tests lift it.
        with mock.patch.dict(os.environ, {"DJANGO_ALLOW_ASYNC_UNSAFE": "true"}):
            connections.close_all()


# --- the library's rows ------------------------------------------------------------


@dataclass(frozen=True)
class SmallLibrary:
    """Two branches with their books, and a member.

    Fixed ids, as the pages and sockets name them: branch 1 ("Central", Ankara)
    holds Dune (book 1, 2 on the shelf) and Emma (book 2, 1 on the shelf); branch 2
    ("Konak", Izmir) holds Ulysses (book 3, 1 on the shelf); member 1 is Ada.
    """

    central: Branch
    konak: Branch
    dune: Book
    emma: Book
    ulysses: Book
    member: Member


@pytest.fixture
def library() -> SmallLibrary:
    """A small library (see ``SmallLibrary``); the test's database mark applies."""
    central = Branch.objects.create(id=1, name="Central", city="Ankara")
    konak = Branch.objects.create(id=2, name="Konak", city="Izmir")
    return SmallLibrary(
        central=central,
        konak=konak,
        dune=Book.objects.create(
            id=1, title="Dune", author="Herbert", branch=central, on_shelf=2
        ),
        emma=Book.objects.create(
            id=2, title="Emma", author="Austen", branch=central, on_shelf=1
        ),
        ulysses=Book.objects.create(
            id=3, title="Ulysses", author="Joyce", branch=konak, on_shelf=1
        ),
        member=Member.objects.create(
            id=1,
            first_name="Ada",
            last_name="Lovelace",
            registered_at=datetime.date(2024, 1, 1),
        ),
    )


@pytest.fixture
def loan(library: SmallLibrary) -> Loan:
    """An open loan of Ulysses to the member, written as a row (no outbox message)."""
    return Loan.objects.create(
        book=library.ulysses,
        member=library.member,
        pickup_date=datetime.date(2024, 3, 1),
    )


@pytest.fixture
def branch() -> Branch:
    return Branch.objects.create(name="Central", city="Ankara")


@pytest.fixture
def book(branch: Branch) -> Book:
    return Book.objects.create(
        title="The Name of the Rose", author="Umberto Eco", branch=branch, on_shelf=2
    )


@pytest.fixture
def member() -> Member:
    return Member.objects.create(
        first_name="Ada",
        last_name="Lovelace",
        email="ada@example.test",
        registered_at=datetime.date(2024, 1, 1),
        user=account("ada"),
    )


@pytest.fixture
def other_member() -> Member:
    return Member.objects.create(
        first_name="Alan",
        last_name="Turing",
        registered_at=datetime.date(2024, 1, 1),
        user=account("alan"),
    )

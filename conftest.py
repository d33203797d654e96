"""Fixtures shared by every app's tests, and where the process tests run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis
from channels.layers import channel_layers
from django.conf import settings

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

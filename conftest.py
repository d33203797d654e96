"""Fixtures shared by every app's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.conf import settings


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

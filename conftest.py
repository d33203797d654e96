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

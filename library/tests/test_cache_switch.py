"""The LIBRARY_CACHE kill switch: read once per process, at first use."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from library.cache import store
from library.cache.metrics import cache_redis


@pytest.fixture
def key() -> Iterator[str]:
    name = f"switch{uuid.uuid4().hex[:10]}"
    yield name
    store.local_tier.discard(name)
    cache_redis().delete(name)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, int]]]:
    events: list[tuple[str, dict[str, int]]] = []

    def record(namespace: str, **counts: int) -> None:
        events.append((namespace, counts))

    # Every module of the store that records: the local tier, cache-aside and
    # stale-while-revalidate.
    for module in (store.local, store.aside, store.revalidate):
        monkeypatch.setattr(module, "metrics_record", record)
    return events


def switch(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    """Set the variable and forget the remembered answer, as a new process would."""
    if value is None:
        monkeypatch.delenv(store.CACHE_SWITCH_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(store.CACHE_SWITCH_VARIABLE, value)
    monkeypatch.setattr(store.switch, "_switch", None)


def counter() -> tuple[list[int], Any]:
    calls: list[int] = []

    def produce() -> dict[str, int]:
        calls.append(1)
        return {"n": len(calls)}

    return calls, produce


def origin_calls(events: list[tuple[str, dict[str, int]]]) -> int:
    return sum(counts.get("origin_calls", 0) for _, counts in events)


def test_off_calls_the_origin_every_time_and_leaves_redis_alone(
    monkeypatch: pytest.MonkeyPatch, key: str, recorded: list[Any]
) -> None:
    switch(monkeypatch, "off")
    calls, produce = counter()
    values = [
        store.cache_aside(
            key=key, namespace="sw", produce=produce, lifetime_s=60, local_s=5
        )
        for _ in range(3)
    ]
    assert values == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert len(calls) == 3
    assert origin_calls(recorded) == 3
    assert all(ns == "sw" for ns, _ in recorded)
    assert cache_redis().exists(key) == 0
    assert store.local_tier.get(key, namespace="sw") is None


def test_off_stale_while_revalidate_calls_the_origin(
    monkeypatch: pytest.MonkeyPatch, key: str, recorded: list[Any]
) -> None:
    switch(monkeypatch, " OFF ")
    calls, produce = counter()
    for n in (1, 2):
        value, stale = store.stale_while_revalidate(
            key=key, namespace="sw", produce=produce, fresh_s=5, stale_s=30
        )
        assert (value, stale) == ({"n": n}, False)
    assert len(calls) == 2
    assert origin_calls(recorded) == 2
    assert cache_redis().exists(key) == 0


@pytest.mark.parametrize("value", [None, "on", "", "maybe"])
def test_on_by_default_and_for_anything_but_off(
    monkeypatch: pytest.MonkeyPatch, key: str, recorded: list[Any], value: str | None
) -> None:
    switch(monkeypatch, value)
    calls, produce = counter()
    for _ in range(3):
        assert store.cache_aside(
            key=key, namespace="sw", produce=produce, lifetime_s=60
        ) == {"n": 1}
    assert len(calls) == 1
    assert origin_calls(recorded) == 1
    assert cache_redis().exists(key) == 1


def test_read_once_at_first_use_not_at_import(
    monkeypatch: pytest.MonkeyPatch, key: str, recorded: list[Any]
) -> None:
    switch(monkeypatch, "off")
    assert store.switch._switch is None  # nothing read yet
    assert store.cache_enabled() is False
    monkeypatch.setenv(store.CACHE_SWITCH_VARIABLE, "on")  # too late for this process
    calls, produce = counter()
    for _ in range(2):
        store.cache_aside(key=key, namespace="sw", produce=produce, lifetime_s=60)
    assert len(calls) == 2
    assert cache_redis().exists(key) == 0

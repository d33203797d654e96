"""The lab-only ASGI routes, and a real daphne shedding load in front of them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from course.instruments.routes import LabRoutes
from course.labs.load_shedding.live import admission_env, fire, shed_servers

Sent = list[dict[str, Any]]


async def inner_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def call(app: LabRoutes, path: str, query: bytes = b"") -> Sent:
    sent: Sent = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "path": path, "query_string": query, "headers": []}
    await app(scope, receive, send)
    return sent


def test_other_paths_go_to_the_inner_app():
    sent = asyncio.run(call(LabRoutes(inner_app), "/books/1/"))
    assert sent[0]["status"] == 204


def test_work_and_wait_answer_accepted_without_the_inner_app():
    async def scenario() -> tuple[Sent, Sent]:
        app = LabRoutes(inner_app)
        return (
            await call(app, "/_lab/work", b"ms=0"),
            await call(app, "/_lab/wait", b"ms=0"),
        )

    work, wait = asyncio.run(scenario())
    for sent in (work, wait):
        assert sent[0]["status"] == 200
        assert dict(sent[0]["headers"])[b"cache-control"] == b"no-store"
        assert sent[1]["body"] == b"accepted\n"


def test_work_capacity_bounds_how_many_are_held_at_once():
    async def scenario() -> float:
        app = LabRoutes(inner_app, work_capacity=1)
        started = time.monotonic()
        await asyncio.gather(*(call(app, "/_lab/work", b"ms=50") for _ in range(3)))
        return time.monotonic() - started

    # One place: three 50 ms holds run one after another.
    assert asyncio.run(scenario()) >= 0.14


async def raw_answers(base_url: str, count: int) -> list[httpx.Response]:
    clients = [httpx.AsyncClient(timeout=30) for _ in range(count)]
    try:
        return list(
            await asyncio.gather(
                *(c.get(f"{base_url}/_lab/work?ms=300") for c in clients)
            )
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


@pytest.mark.processes
def test_admission_control_keeps_accepted_latency_bounded_while_rejecting():
    """Real daphne, ten simultaneous requests: four served, six shed at once."""
    envs = [
        admission_env(max_running=2, max_queued=2),
        admission_env(max_running=2, max_queued=100),
    ]
    with shed_servers(envs) as (controlled, unbounded):
        shed = fire(controlled, requests=10, job_ms=300)
        queued = fire(unbounded, requests=10, job_ms=300)
        answers = asyncio.run(raw_answers(controlled.base_url, 6))
    refused = [r for r in answers if r.status_code == 503]
    assert len(refused) == 2
    for response in refused:
        assert response.headers["retry-after"] == "1"
        assert response.content == b"shed\n"
    accepted = sorted(ms for code, ms in shed if code == 200)
    rejected = [ms for code, ms in shed if code == 503]
    assert (len(accepted), len(rejected)) == (4, 6)
    assert all(code == 200 for code, _ in queued)
    # Every rejection came back before any accepted request finished, and the
    # accepted ones finished long before the unbounded server's last one.
    assert max(rejected) < min(accepted)
    assert max(accepted) < max(ms for _, ms in queued) / 2

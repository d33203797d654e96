"""Admission control: classes, deadlines, exempt routes, and a real daphne shedding."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest

from config.admission import AdmissionControl, Limits, Message, Priority, route_class
from course.labs.load_shedding_lab.live import admission_env, measure, shed_servers

Sent = list[dict[str, Any]]


class Held:
    """An inner app whose requests finish only when the test releases them."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        self.started.append(path)
        gate = self.gates.setdefault(path, asyncio.Event())
        await gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def release(self, path: str) -> None:
        self.gates.setdefault(path, asyncio.Event()).set()


def request(app: AdmissionControl, path: str) -> tuple[asyncio.Task[None], Sent]:
    sent: Sent = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "path": path, "query_string": b"", "headers": []}
    return asyncio.ensure_future(app(scope, receive, send)), sent


def status(sent: Sent) -> int | None:
    return sent[0]["status"] if sent else None


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_route_classes_put_loan_returns_above_reports_and_exempt_long_polls():
    assert route_class("/loans/12/return/") == Priority.CRITICAL
    assert route_class("/books/3/") == Priority.NORMAL
    assert route_class("/course/backpressure/run") == Priority.LOW
    assert route_class("/jobs/abc/wait") is None
    assert route_class("/realtime/jobs/abc/wait") is None
    assert route_class("/realtime/branches/3/events") is None
    assert route_class("/realtime/reports/loans.csv") == Priority.LOW
    assert route_class("/static/js/lab.js") is None


def test_full_system_sheds_at_once_with_503_and_retry_after():
    async def scenario() -> None:
        inner = Held()
        app = AdmissionControl(inner, limits=Limits(max_running=1, max_queued=1))
        first, sent1 = request(app, "/a")
        second, sent2 = request(app, "/b")
        third, sent3 = request(app, "/c")
        await settle()
        assert status(sent3) == 503  # shed before the others finish
        headers = dict(sent3[0]["headers"])
        assert headers[b"retry-after"] == b"1"
        assert sent3[1]["body"] == b"shed\n"
        assert inner.started == ["/a"]
        inner.release("/a")
        inner.release("/b")
        await asyncio.gather(first, second, third)
        assert (status(sent1), status(sent2)) == (200, 200)
        assert app.stats.shed[("normal", "full")] == 1
        assert app.stats.peak_running == 1

    run(scenario)


def test_a_loan_return_outranks_queued_reports_and_uses_the_reserved_place():
    async def scenario() -> None:
        inner = Held()
        limits = Limits(max_running=1, max_queued=1, reserved=1)
        app = AdmissionControl(inner, limits=limits)
        page, _ = request(app, "/books/1/")
        report, report_sent = request(app, "/course/x/run")  # low, queued
        await settle()
        # Queue full: a normal request displaces the queued low one.
        other, other_sent = request(app, "/books/2/")
        await settle()
        assert status(report_sent) == 503
        # The critical request runs at once on the reserved place.
        loan, loan_sent = request(app, "/loans/5/return/")
        await settle()
        assert inner.started == ["/books/1/", "/loans/5/return/"]
        for path in ("/loans/5/return/", "/books/1/", "/books/2/"):
            inner.release(path)
        await asyncio.gather(page, report, other, loan)
        assert status(loan_sent) == status(other_sent) == 200
        assert app.stats.shed[("low", "displaced")] == 1

    run(scenario)


def test_a_queued_request_whose_budget_expires_is_dropped_unprocessed():
    async def scenario() -> None:
        inner = Held()
        app = AdmissionControl(
            inner, limits=Limits(max_running=1, max_queued=4, budget_ms=50)
        )
        first, _ = request(app, "/slow")
        late, late_sent = request(app, "/late")
        await asyncio.sleep(0.2)
        assert status(late_sent) == 503
        assert inner.started == ["/slow"]  # never reached the app
        inner.release("/slow")
        await asyncio.gather(first, late)
        assert app.stats.shed[("normal", "deadline")] == 1

    run(scenario)


def test_exempt_routes_do_not_count_as_running_work():
    async def scenario() -> None:
        inner = Held()
        app = AdmissionControl(inner, limits=Limits(max_running=1, max_queued=0))
        polls = [request(app, f"/jobs/{n}/wait") for n in range(5)]
        page, page_sent = request(app, "/books/1/")
        await settle()
        assert app.stats.running == 1
        assert app.stats.exempt == 5
        for n in range(5):
            inner.release(f"/jobs/{n}/wait")
        inner.release("/books/1/")
        await asyncio.gather(page, *(task for task, _ in polls))
        assert status(page_sent) == 200

    run(scenario)


def test_disabled_admission_passes_everything():
    async def scenario() -> None:
        inner = Held()
        app = AdmissionControl(
            inner, limits=Limits(max_running=1, max_queued=0), enabled=False
        )
        tasks = [request(app, f"/p{n}") for n in range(3)]
        await settle()
        assert len(inner.started) == 3
        for n in range(3):
            inner.release(f"/p{n}")
        await asyncio.gather(*(task for task, _ in tasks))
        assert all(status(sent) == 200 for _, sent in tasks)

    run(scenario)


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
        shed = measure(controlled, requests=10, job_ms=300)
        queued = measure(unbounded, requests=10, job_ms=300)
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

"""Load shedding: queueing by class, deadlines, exempt routes, the 503.

The route classes are in test_shedding_policy.py; a real daphne shedding, behind the
lab routes, is in course/tests/test_lab_routes.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from jobs.shedding import AdmissionControl, Message
from jobs.shedding_policy import Limits
from jobs.tests.manual_loop import manual_loop, run_manual

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
        # The budget's timer and the admission's clock are the loop's, which only
        # this test moves: the drop is checked just before and at the 125 ms.
        loop = manual_loop()
        inner = Held()
        app = AdmissionControl(
            inner,
            limits=Limits(max_running=1, max_queued=4, budget_ms=125),
            clock=loop.time,
        )
        first, _ = request(app, "/slow")
        late, late_sent = request(app, "/late")
        await settle()
        loop.advance(0.125 - 2**-10)  # a millisecond before the budget runs out
        await settle()
        assert status(late_sent) is None  # still queued
        assert app.stats.queued == 1
        loop.advance(2**-10)  # queued for exactly its budget
        await settle()
        assert status(late_sent) == 503
        assert inner.started == ["/slow"]  # never reached the app
        inner.release("/slow")
        await asyncio.gather(first, late)
        assert app.stats.shed[("normal", "deadline")] == 1

    run_manual(scenario)


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

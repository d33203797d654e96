"""Two real daphne instances share the Redis channel layer.

A loan issued through one instance's HTTP form reaches live sockets and browser tabs
on both, carried by a real rq worker; a tab whose server went away resynchronises.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import time

import httpx
import pytest
import websockets
from websockets.typing import Origin

from config.processes import free_port, start_daphne, start_manage, stop
from library.models import Book, Branch, Member
from tests.browser import needs_chromium
from tests.people import DESK_PASSWORD, desk_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]
PASSWORD = DESK_PASSWORD


@pytest.fixture
def library(transactional_db):
    branch = Branch.objects.create(id=1, name="Central", city="Ankara")
    Book.objects.create(id=1, title="Dune", author="Herbert", branch=branch, on_shelf=5)
    Book.objects.create(id=2, title="Emma", author="Austen", branch=branch, on_shelf=2)
    Member.objects.create(
        id=1, first_name="Ada", last_name="L", registered_at=datetime.date(2024, 1, 1)
    )
    desk_user()
    return branch


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        stop(process)


@pytest.fixture
def instances(library):
    """Two daphne instances, one messaging worker and the scheduler (the sweep).

    Function-scoped on purpose: the processes must be gone before the test database
    is flushed, or PostgreSQL's TRUNCATE can deadlock with a worker's transaction.
    """
    ports = [free_port(), free_port()]
    processes = []
    try:
        processes += [start_daphne(port) for port in ports]
        processes += [start_manage("rqworker", "messaging"), start_manage("scheduler")]
        yield ports
    finally:
        stop_all(processes)


@pytest.fixture
def one_server(library):
    """A single daphne instance, for checks that need no worker."""
    port = free_port()
    server = start_daphne(port)
    try:
        yield port
    finally:
        stop(server)


def issue_loan_through_form(port: int, book_id: int) -> None:
    """Sign in as staff and issue a loan with the real form (CSRF and all)."""
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, follow_redirects=False) as client:
        client.get("/accounts/login/")
        token = client.cookies["csrftoken"]
        login = client.post(
            "/accounts/login/",
            data={
                "login": "desk",
                "password": PASSWORD,
                "csrfmiddlewaretoken": token,
            },
            headers={"Referer": base + "/accounts/login/"},
        )
        assert login.status_code == 302, login.text[:300]
        client.get("/loans/issue/")
        answer = client.post(
            "/loans/issue/",
            data={
                "book_id": book_id,
                "member_id": 1,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": base + "/loans/issue/"},
        )
        assert answer.status_code == 303, answer.text[:500]


async def next_update(socket: websockets.ClientConnection) -> dict[str, object]:
    while True:
        message = json.loads(await socket.recv())
        if message["type"] == "update":
            return message


def test_loan_through_one_instance_updates_sockets_on_both(instances):
    port_a, port_b = instances

    async def scenario() -> list[tuple[dict[str, object], float]]:
        sockets = [
            await websockets.connect(
                f"ws://127.0.0.1:{port}/ws/branches/1/stock/",
                origin=Origin(f"http://127.0.0.1:{port}"),
            )
            for port in (port_a, port_b, port_b)
        ]
        for socket in sockets:
            assert json.loads(await socket.recv())["type"] == "snapshot"
        await asyncio.to_thread(issue_loan_through_form, port_a, 1)
        # From the commit on; the worker may still be starting (four processes
        # share two cores here), which the generous bound below allows for.
        started = time.monotonic()
        results = []
        for socket in sockets:
            update = await asyncio.wait_for(next_update(socket), timeout=20)
            results.append((update, time.monotonic() - started))
            await socket.close()
        return results

    results = asyncio.run(scenario())
    for update, _ in results:
        assert (update["book"], update["on_shelf"], update["total"]) == (1, 4, 6)
        assert update["version"] == 1
    # Latency is measured in bench/; here only a generous bound against a hang.
    assert max(delay for _, delay in results) < 20


def test_foreign_origin_is_refused_by_a_real_server(one_server):
    async def attempt() -> None:
        await websockets.connect(
            f"ws://127.0.0.1:{one_server}/ws/branches/1/stock/",
            origin=Origin("http://attacker.example"),
        )

    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        asyncio.run(attempt())
    assert refused.value.response.status_code == 403


def test_plain_http_to_the_socket_route_is_not_a_500(one_server):
    response = httpx.get(f"http://127.0.0.1:{one_server}/ws/branches/1/stock/")
    assert response.status_code == 426  # realtime.upgrade
    assert response.headers["upgrade"] == "websocket"


def shelf_count(page, book_id: int) -> int:
    return page.evaluate(f"window.liveShelf.state.books.get({book_id}).on_shelf")


def wait_for_count(page, book_id: int, expected: int, timeout_ms: int = 15_000) -> None:
    page.wait_for_function(
        f"() => window.liveShelf && window.liveShelf.state.books.get({book_id})"
        f" && window.liveShelf.state.books.get({book_id}).on_shelf === {expected}",
        timeout=timeout_ms,
    )


@pytest.mark.browser
@needs_chromium
def test_three_tabs_on_two_instances_follow_a_loan_from_a_fourth(instances, browser):
    port_a, port_b = instances
    context = browser.new_context()
    tabs = []
    for port in (port_a, port_b, port_a):
        tab = context.new_page()
        tab.goto(f"http://127.0.0.1:{port}/branches/1/live/")
        wait_for_count(tab, 1, 5)
        tabs.append(tab)

    desk = browser.new_context().new_page()  # the fourth tab: staff at the desk
    desk.goto(f"http://127.0.0.1:{port_b}/accounts/login/")
    desk.fill("input[name=login]", "desk")
    desk.fill("input[name=password]", PASSWORD)
    desk.click("form.card button")
    desk.goto(f"http://127.0.0.1:{port_b}/loans/issue/?book=1")
    desk.fill("input[name=member]", "1")  # a card number names the member
    desk.click("text=Issue loan")
    desk.wait_for_url("**/books/1/**")

    for tab in tabs:
        wait_for_count(tab, 1, 4)
        assert tab.inner_text("[data-live-total]") == "6"

    # A socket killed and reopened resynchronises, even across a missed update.
    tab = tabs[0]
    tab.evaluate("window.liveShelf.reconnect()")
    issue_loan_through_form(port_b, 2)
    wait_for_count(tab, 2, 1)
    wait_for_count(tab, 1, 4)
    assert tab.inner_text("[data-live-total]") == "5"

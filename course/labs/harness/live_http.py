"""Real daphne processes for the labs, and the servers' own cache counters.

``daphne_processes`` starts the daphne processes of every lab that runs its own
servers; ``daphnes`` adds what the HTTP labs share (a LIBRARY_CACHE per instance, a
progress step, quiet httpx). The cache-layers and hot-key labs start several
instances at once, some with the cache switched off (``LIBRARY_CACHE=off``), and
read the origin calls each instance made.

Origin calls are counted by the servers themselves (``library.cache.metrics``): each
daphne buffers its counters and sends them to Redis at most ``FLUSH_INTERVAL_S``
later, on its next recorded event. ``counters_settled`` therefore waits past that
interval and then asks every instance for a catalogue page with a session cookie
(so no page-level cache answers it and the view records an event in the ``list``
namespace, which these labs never measure): that event flushes the whole buffer.
The counters are shared by every process on the same Redis database, so traffic of
the installation during a run is counted too; the labs read deltas around their own
requests and say so.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final

import httpx
from django.contrib.auth import get_user_model
from django.db import connection

from config.processes import (
    ProcessExited,
    WaitTimeout,
    child_environment,
    daphne_command,
    free_port,
    start,
    stop_all,
    wait_listening,
)
from course.labs.harness.base import LabError, Progress
from course.labs.harness.live import live_step
from library.cache import reads
from library.cache.metrics import FLUSH_INTERVAL_S, metrics_read
from library.cache.pages import page_key
from library.cache.store import generations_bump
from library.models import Book
from library.permissions import ISSUE_LOAN, permission_get

START_TIMEOUT_S: Final = 60.0
# Past the servers' flush interval, so their next event sends the buffer.
FLUSH_WAIT_S: Final = FLUSH_INTERVAL_S + 0.2
# A day: wide enough that the window never loses the run's own minute buckets.
WINDOW_MINUTES: Final = 24 * 60
COUNTED: Final = (
    "origin_calls",
    "hits",
    "misses",
    "stale_served",
    "singleflight_saved",
    "singleflight_fallbacks",
)
# With DEBUG off the settings redirect plain HTTP; the lab stands where a
# TLS-terminating proxy would.
PROXY_HEADERS: Final = {"X-Forwarded-Proto": "https"}

Counters = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Daphne:
    """One running daphne of the project: where it listens and how it was started."""

    name: str
    port: int
    cache: str  # LIBRARY_CACHE of the process: "on" or "off"
    process: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def check(self) -> None:
        """Raise LabError when this server has exited."""
        code = self.process.poll()
        if code is not None:
            raise LabError(
                f"live: daphne {self.name} exited with status {code}; run it by hand "
                "to see why: python -m daphne config.asgi:application"
            )


def host_header(port: int) -> str:
    """Return a Host value the server accepts: 127.0.0.1, or the first allowed name."""
    from django.conf import settings

    allowed = [h for h in settings.ALLOWED_HOSTS if h not in ("*", "")]
    if settings.DEBUG or not allowed or "127.0.0.1" in allowed:
        return f"127.0.0.1:{port}"
    return allowed[0].lstrip(".")


def request_headers(server: Daphne) -> dict[str, str]:
    from django.conf import settings

    headers = {"Host": host_header(server.port)}
    if settings.SECURE_SSL_REDIRECT:
        # Only then: a request marked secure also gets the CSRF Referer check, which
        # the sign-in form of a plain-HTTP lab client would fail.
        headers.update(PROXY_HEADERS)
    return headers


@contextmanager
def daphne_processes(
    envs: Sequence[Mapping[str, str]],
    *,
    what: str = "daphne",
    started: Callable[[list[int]], None] | None = None,
) -> Iterator[list[tuple[int, subprocess.Popen[bytes]]]]:
    """Start one daphne of the project per environment; yield (port, process) pairs.

    Each runs with ``child_environment(**env)`` (this process's database and Redis)
    in a session of its own. They start together (start-up is most of their cost);
    ``started`` gets their ports before the wait, the block is entered once all
    listen, and they are stopped with their process groups however it ends.
    ``what`` names them in errors.
    """
    servers: list[tuple[int, subprocess.Popen[bytes]]] = []
    try:
        for env in envs:
            port = free_port()
            servers.append(
                (port, start(daphne_command(port), env=child_environment(**env)))
            )
        if started is not None:
            started([port for port, _ in servers])
        deadline = time.monotonic() + START_TIMEOUT_S
        for port, process in servers:
            try:
                wait_listening(
                    port, process, timeout=max(0.0, deadline - time.monotonic())
                )
            except ProcessExited:
                raise LabError(
                    f"live: {what} on port {port} exited with status"
                    f" {process.returncode}; run it by hand to see why: python -m"
                    " daphne config.asgi:application"
                ) from None
            except WaitTimeout:
                raise LabError(
                    f"live: {what} did not listen within {START_TIMEOUT_S:g} s"
                ) from None
        yield servers
    finally:
        stop_all([process for _, process in servers])


@contextmanager
def daphnes(
    progress: Progress, caches: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Iterator[list[Daphne]]:
    """Start one daphne per entry of ``caches`` (its LIBRARY_CACHE); stop them all.

    ``env`` adds variables to every server's environment. The servers share this
    process's database, so the block must not run inside a transaction they could
    not see.
    """
    if connection.in_atomic_block:
        raise LabError("live: run the live part outside a database transaction")

    def announce(ports: list[int]) -> None:
        described = ", ".join(
            f"{port} (cache {cache})" for port, cache in zip(ports, caches, strict=True)
        )
        live_step(progress, 0.02, f"starting daphne on ports {described}")

    envs = [{"LOG_LEVEL": "WARNING", **(env or {}), "LIBRARY_CACHE": c} for c in caches]
    # httpx logs every request at INFO; the lab's tables already say what happened.
    quiet = logging.getLogger("httpx")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        with daphne_processes(envs, started=announce) as started:
            yield [
                Daphne(f"daphne-{index}", port, cache, process)
                for index, ((port, process), cache) in enumerate(
                    zip(started, caches, strict=True), start=1
                )
            ]
    finally:
        quiet.setLevel(level)


@contextmanager
def daphne_client(progress: Progress) -> Iterator[httpx.Client]:
    """Start daphne on a free port (same database and Redis); yield an httpx client.

    The server keeps this process's LIBRARY_CACHE and is stopped with its whole
    process group however the block ends.
    """
    # The Host header only, as this lab has always sent: request_headers' proxy
    # header would also bring the CSRF Referer check into its sign-in.
    cache = os.environ.get("LIBRARY_CACHE", "on")
    with (
        daphnes(progress, [cache]) as (server,),
        httpx.Client(
            base_url=server.base_url,
            headers={"Host": host_header(server.port)},
            timeout=30.0,
        ) as client,
    ):
        yield client


def client_for(server: Daphne, **options: object) -> httpx.Client:
    """Return a keep-alive client of ``server`` that sends no cookies unless told."""
    return httpx.Client(
        base_url=server.base_url,
        headers=request_headers(server),
        timeout=30.0,
        **options,  # type: ignore[arg-type]
    )


def counters(namespaces: Sequence[str]) -> Counters:
    """Return the chosen counters of each namespace, summed over the last day."""
    report = metrics_read(WINDOW_MINUTES)
    found: Counters = {}
    for namespace in namespaces:
        metrics = report.get(namespace)
        found[namespace] = {
            name: int(metrics[name]) if metrics is not None else 0  # type: ignore[literal-required]
            for name in COUNTED
        }
    return found


def counters_settled(
    servers: Sequence[Daphne], namespaces: Sequence[str], *, flush_path: str
) -> Counters:
    """Make every server flush its buffered counters, then read them.

    ``flush_path`` must record an event in a namespace outside ``namespaces``.
    """
    from django.conf import settings

    time.sleep(FLUSH_WAIT_S)
    # A session cookie, even one naming no session, keeps a page-level cache from
    # answering: the view runs and records its event.
    cookie = {settings.SESSION_COOKIE_NAME: "lab-flush"}
    for server in servers:
        server.check()
        with client_for(server, cookies=cookie) as client:
            response = client.get(flush_path)
        if response.status_code != 200:
            raise LabError(
                f"live: {server.name} answered {response.status_code} for {flush_path}"
            )
    return counters(namespaces)


def book_keys(book_ids: Iterable[int]) -> list[str]:
    """Return the data tier's keys of these books' pages, as its read builds them.

    The key names the row's version and update time (``reads.book_detail``), so it
    is read from the database here as there.
    """

    rows = Book.objects.filter(pk__in=list(book_ids)).values_list(
        "pk", "branch_id", "version", "updated_at"
    )
    return [
        reads.BOOK.key(
            tenant=reads.branch_tenant(branch_id),
            criteria={
                "id": book_id,
                "v": version,
                "u": int(updated_at.timestamp() * 1_000_000),
            },
        )
        for book_id, branch_id, version, updated_at in rows
    ]


def page_keys(paths: Iterable[str]) -> list[str]:
    """Return the page tier's keys of these anonymous pages (``library.cache.pages``).

    The tier keeps whole anonymous responses in front of the views; its own
    ``page_key`` names the entry a request would use. Only single-copy pages are
    covered: a hot page split into copies gets a random copy suffix.
    """
    from django.test import RequestFactory

    factory = RequestFactory()
    found = (page_key(factory.get(path)) for path in paths)
    return [entry[0] for entry in found if entry is not None]


def server_cold(
    *,
    books: Iterable[int] = (),
    branches: Iterable[int] = (),
    members: Iterable[int] = (),
) -> None:
    """Retire the server cache's entries for these pages, in one Redis round trip.

    Book pages lose their data-tier and page-tier entries, branch pages their stock
    entry; members' history generations are bumped, the retirement a loan causes.
    """

    books = list(books)
    doomed = [reads.STOCK.key(tenant=reads.branch_tenant(b)) for b in branches]
    doomed += book_keys(books)
    doomed += page_keys(f"/books/{book_id}/" for book_id in books)
    histories = [(reads.HISTORY.namespace, reads.member_tenant(m)) for m in members]
    generations_bump(histories, delete=tuple(doomed))


def counters_delta(after: Counters, before: Counters) -> Counters:
    return {
        namespace: {
            name: value - before[namespace][name] for name, value in fields.items()
        }
        for namespace, fields in after.items()
    }


def total(delta: Counters, name: str) -> int:
    """Return one counter summed over the namespaces of ``delta``."""
    return sum(fields[name] for fields in delta.values())


def percentile(values: Sequence[float], share: float) -> float:
    """Return the nearest-rank percentile (``share`` in [0, 100]) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 100))
    return ordered[int(rank) - 1]


# --- a signed-in staff client --------------------------------------------------------

LOGIN_PATH: Final = "/accounts/login/"


def expect_status(response: Any, status: int, what: str) -> Any:
    """Return ``response`` if it has ``status``; else raise LabError naming ``what``."""
    if response.status_code != status:
        raise LabError(
            f"live: {what} answered {response.status_code}, expected {status}"
        )
    return response


def csrf_token(html: str) -> str:
    """Return the CSRF token of the form in ``html``."""
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if found is None:
        raise LabError("live: the sign-in form carries no CSRF token")
    return found.group(1)


@contextmanager
def signed_in_staff(client: Any, run: str) -> Iterator[None]:
    """Create a throwaway staff account, sign in through the real form, and at the
    end sign out and delete the account."""
    users = get_user_model()
    username = f"lab-live-{run}"
    password = secrets.token_urlsafe(18)
    account = users.objects.create_user(
        username=username, password=password, is_staff=True
    )
    # The desk's form is one of the pages read; staff alone would get its 403.
    account.user_permissions.add(permission_get(ISSUE_LOAN))
    try:
        form = expect_status(client.get(LOGIN_PATH), 200, "the sign-in form")
        expect_status(
            client.post(
                LOGIN_PATH,
                data={
                    "login": username,
                    "password": password,
                    "csrfmiddlewaretoken": csrf_token(form.text),
                },
            ),
            302,
            "signing in",
        )
        yield
    finally:
        token = client.cookies.get("csrftoken")
        if token:
            with suppress(Exception):
                client.post("/accounts/logout/", data={"csrfmiddlewaretoken": token})
        client.cookies.clear()
        users.objects.filter(username=username).delete()

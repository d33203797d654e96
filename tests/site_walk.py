"""Every route of the site as a concrete path, over a small library of real rows.

Tests that must hold for every page (signed-in pages are private, no input makes a
500) walk ``routes()`` instead of a hand-made list, so a route added later is
walked too. Each route's parameters are filled from ``SmallLibrary``; a route whose
parameter has no value here, or whose path does not resolve back to its own view,
is reported by ``routes()`` (``Walk.unfilled``) so the tests can fail on it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.resolvers import RegexPattern, RoutePattern
from django.utils import timezone

from course.models import LabRun
from jobs.models import JobStatus
from jobs.scheduler import periodic_tasks
from jobs.services import jobstatus_create
from library.models import Book, Branch, Loan, Member
from library.services import loan_issue
from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.registry import STREAM_CONSUMERS

PASSWORD = "correct-horse-battery"
LESSON = "cache-layers"
SOURCE_FILE = "library/models.py"


@dataclass
class SmallLibrary:
    """A branch with two books, a member with an open loan, two jobs, two accounts."""

    branch: Branch
    book: Book
    member: Member
    loan: Loan
    staff: User  # a superuser, as the seed's desk account: reaches every page
    reader: User  # the member's own account: no right at all
    report: JobStatus  # a monthly report started by staff
    lab: JobStatus  # a lab run of the reader's
    dead_letter: DeadLetter  # the loan's notification, dead after its attempts


def small_library() -> SmallLibrary:
    """Create the rows the walk fills route parameters from."""
    users = get_user_model().objects
    staff = users.create_superuser("walk-staff", password=PASSWORD)
    reader = users.create_user("walk-reader", password=PASSWORD)
    branch = Branch.objects.create(name="Central", city="Ankara")
    book = Book.objects.create(
        title="The Name of the Rose", author="Umberto Eco", branch=branch, on_shelf=2
    )
    Book.objects.create(title="Dune", author="Frank Herbert", branch=branch, on_shelf=1)
    member = Member.objects.create(
        first_name="Ada",
        last_name="Lovelace",
        registered_at=datetime.date(2024, 1, 1),
        user=reader,
    )
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    report = jobstatus_create(
        kind="report", name="monthly-loans", params={"month": "2025-03"}, user=staff
    )
    lab = jobstatus_create(kind="lab", name=LESSON, params={}, user=reader)
    LabRun.objects.create(job=lab, slug=LESSON, visitor=f"user:{reader.pk}")
    return SmallLibrary(
        branch, book, member, loan, staff, reader, report, lab, _dead_letter()
    )


def _dead_letter() -> DeadLetter:
    message = OutboxMessage.objects.order_by("id").first()
    assert message is not None, "issuing the loan wrote its outbox message"
    now = timezone.now()
    delivery = Delivery.objects.create(
        message=message,
        subscription="notification",
        status=Delivery.Status.DEAD,
        attempts=5,
        available_at=now,
    )
    return DeadLetter.objects.create(
        delivery=delivery,
        subscription=delivery.subscription,
        message_type=message.type,
        body=message.body,
        attempts=5,
        last_error="RuntimeError: the walk's own dead letter",
        first_failed_at=now,
        last_failed_at=now,
    )


@dataclass(frozen=True)
class Route:
    """One URL pattern: its full name, its concrete path, and the view it runs."""

    name: str  # "namespace:name", or the pattern itself when it has no name
    path: str
    view: Any


@dataclass
class Walk:
    routes: list[Route] = field(default_factory=list)
    # Patterns no concrete path could be made for, with the reason.
    unfilled: list[str] = field(default_factory=list)
    # Patterns whose path an earlier pattern answers: no request reaches them.
    shadowed: list[str] = field(default_factory=list)


def _patterns(
    resolvers: list[Any], parts: tuple[Any, ...] = (), namespace: str = ""
) -> Iterator[tuple[tuple[Any, ...], str, URLPattern]]:
    for entry in resolvers:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _patterns(entry.url_patterns, (*parts, entry.pattern), inner)
        else:
            yield (*parts, entry.pattern), namespace, entry


_ROUTE_PARAM = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")
_REGEX_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?:[^()]|\([^()]*\))*\)\??")


def _fill_route(route: str, values: dict[str, str]) -> str:
    return _ROUTE_PARAM.sub(lambda m: values[m["name"]], route)


def _fill_regex(regex: str, values: dict[str, str]) -> str:
    text = _REGEX_GROUP.sub(lambda m: values[m["name"]], regex)
    text = text.removeprefix("^").removesuffix("\\Z").removesuffix("$")
    text = text.replace("/?", "/")
    return re.sub(r"\\(.)", r"\1", text)


def _admin_model_prefixes() -> dict[str, type[Any]]:
    return {
        f"{model._meta.app_label}_{model._meta.model_name}_": model
        for model in admin.site._registry
    }


def _object_id(url_name: str) -> str:
    """Return the pk of a real row of the admin model the URL name is about."""
    for prefix, model in _admin_model_prefixes().items():
        if url_name.startswith(prefix) and model._meta.managed:
            pk = model._default_manager.values_list("pk", flat=True).first()
            return str(pk) if pk is not None else "1"
    return "1"


def _named_row(url_name: str) -> str:
    if url_name.startswith("messaging_streamconsumer"):
        return next(iter(STREAM_CONSUMERS))
    if url_name.startswith("jobs_scheduledtaskstate"):
        return periodic_tasks()[0].name
    return "none"


def _values(library: SmallLibrary, url_name: str) -> dict[str, str]:
    # The route parameters of the whole site, each from a real row where one fits.
    return {
        "branch_id": str(library.branch.pk),
        "book_id": str(library.book.pk),
        "member_id": str(library.member.pk),
        "loan_id": str(library.loan.pk),
        "job_id": str(library.lab.pk if "explained" in url_name else library.report.pk),
        "slug": LESSON,
        "path": SOURCE_FILE,
        "object_id": _object_id(url_name),
        "id": str(library.staff.pk),
        "content_type_id": str(ContentType.objects.get_for_model(Book).pk),
        "app_label": "library",
        "name": _named_row(url_name),
        "url": "nowhere/",
        "queue_index": "0",
        "scheduler_index": "0",
        "connection_index": "0",
        "scheduler_name": "none",
        "cron_job_name": "none",
        "key": "none",
        "uidb36": "1",  # allauth's password-reset link: a user id in base 36
        "challenge_id": "none",  # a lesson's challenge: an unknown one is a 404
        "result_id": "none",
        "token": "none",
    }


def routes(library: SmallLibrary) -> Walk:
    """Return every URL pattern of the site as a concrete path that resolves to it."""
    walk = Walk()
    for parts, namespace, pattern in _patterns(get_resolver().url_patterns):
        shown = "".join(str(part) for part in parts)
        name = f"{namespace}{pattern.name}" if pattern.name else shown
        values = _values(library, pattern.name or "")
        try:
            pieces = [
                _fill_route(str(part), values)
                if isinstance(part, RoutePattern)
                else _fill_regex(str(part.regex.pattern), values)
                for part in parts
                if isinstance(part, RoutePattern | RegexPattern)
            ]
        except KeyError as missing:
            walk.unfilled.append(f"{shown}: no value for {missing}")
            continue
        path = "/" + "".join(pieces)
        try:
            match = resolve(path)
        except Exception as error:  # reported: the test fails on it
            walk.unfilled.append(f"{shown}: {path} does not resolve ({error})")
            continue
        if match.func is not pattern.callback:
            if any(route.path == path for route in walk.routes):
                walk.shadowed.append(shown)  # an earlier pattern takes its path
            else:
                walk.unfilled.append(f"{shown}: {path} resolves to another view")
            continue
        walk.routes.append(Route(name, path, pattern.callback))
    return walk


def signed_in(user: User, *, raise_errors: bool = True) -> Client:
    """Return a test client signed in as ``user``.

    ``raise_errors=False`` returns a view's exception as the 500 page a visitor
    would get, through every middleware, instead of raising it in the test.
    """
    client = Client(raise_request_exception=raise_errors)
    client.force_login(user)
    return client

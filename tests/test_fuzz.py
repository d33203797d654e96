"""No form field or query parameter of the site answers hostile input with a 500.

The fields are found, not listed by hand: every route of the site is fetched as a
superuser (``tests.site_walk``) and its HTML forms and same-page links are read;
every admin changelist adds the parameters of its filters, search, ordering, pages
and date hierarchy. Parameters that views read without a form on any page (a
poll's ``version``, the desk's suggestions) are declared in ``DECLARED``, and a
scan of the source checks that every parameter a view reads by name, and every
field of a form bound to request data, is fuzzed. Each field then gets each value
of ``HOSTILE`` (the others keep the values the page offered), and any answer of
500 or more is a failure. It runs on both databases: the NUL byte that SQLite
stores is a DataError on PostgreSQL.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urljoin, urlsplit

import pytest
from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, SEARCH_VAR
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.test import Client
from django.urls import Resolver404, resolve, reverse

from tests.site_walk import SmallLibrary, routes, signed_in, small_library

# Transactional: a database error in one request must not break the next, as in
# production, where no test transaction wraps them all.
pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
APPS = ("course", "jobs", "library", "messaging", "realtime")

# label -> the value as sent, already percent-encoded; several values repeat the
# parameter (an array: ``x=1&x=2``).
HOSTILE: dict[str, list[str]] = {
    "nul": ["%00"],
    "nul-inside": ["a%00b"],
    "huge": ["9" * 40],
    "huge-negative": ["-" + "9" * 40],
    "negative": ["-1"],
    "month-9999-12": ["9999-12"],
    "date-9999-12-31": ["9999-12-31"],
    "float-overflow": ["1e999"],
    "long": ["x" * 20_000],
    "bad-utf8": ["%FF%FE%C3%28"],
    "array": ["1", "2"],
    "empty": [""],
}

# Parameters views read that no page offers as a form field or link, per route:
# (route name, method, fields with the values to send beside the fuzzed one). A
# value "{dead_letter}" is the small library's open dead letter.
DECLARED: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("jobstatus-status", "GET", {"version": ""}),
    ("realtime/jobs/<uuid:job_id>/status", "GET", {"version": ""}),
    ("realtime-job-wait", "GET", {"version": ""}),
    ("realtime-job-wait", "GET", {"timeout_ms": ""}),
    ("realtime-job-events", "GET", {"lastEventId": ""}),
    ("realtime-branch-events", "GET", {"lastEventId": ""}),
    ("report-loans-csv", "GET", {"month": "2025-03", "form": "buffered"}),
    ("course-source", "GET", {"lines": "1-3"}),
    ("course-lesson", "GET", {"job": ""}),
    ("course-compare", "GET", {"run": ""}),
    # The explorable page's model answers (static/js/explore.js asks them).
    ("course-model", "GET", {"since": "", "requests": "600"}),
    ("course-progress", "POST", {"event": "answer", "question": "0"}),
    ("member-detail", "GET", {"page": "1"}),
    ("branch-books", "GET", {"q": "rose", "page": "1"}),
    ("loan-issue", "GET", {"book": ""}),
    ("loan-find", "GET", {"book": "", "member": ""}),
    ("desk-suggest-books", "GET", {"q": "rose"}),
    ("desk-suggest-members", "GET", {"q": "ada"}),
    ("desk-suggest-loans", "GET", {"q": "rose"}),
    ("admin:cache_metrics", "GET", {"window": ""}),
    ("admin:operations_history", "GET", {"window": ""}),
    # Its resize forms show only beside a bound that exists.
    ("admin:bounded_queues_resize", "POST", {"bound": "fuzz", "capacity": "5"}),
    # The dead letters' confirmation pages answer the action's POST, not a GET.
    (
        "admin:messaging_deadletter_changelist",
        "POST",
        {"action": "redrive", "_selected_action": "{dead_letter}", "post": "yes"},
    ),
    (
        "admin:messaging_deadletter_changelist",
        "POST",
        {
            "action": "discard",
            "_selected_action": "{dead_letter}",
            "post": "yes",
            "reason": "fuzz",
        },
    ),
)

# Forms not fuzzed: signing out would end the walk's session. Django's own model
# forms of the admin (add, change, delete, history, password) are not the site's
# views; the admin's part here is its changelists and the pages it adds.
SKIPPED_ACTIONS = frozenset({"account_logout", "admin:logout"})
STOCK_ADMIN_PAGES = ("_add", "_change", "_delete", "_history", "password_change")
NOT_FIELDS = frozenset({"csrfmiddlewaretoken"})


@dataclass(frozen=True)
class Target:
    """One request shape: method, path and the fields with the values offered."""

    method: str
    path: str
    # None: a field the form has but does not send as offered (an unticked box).
    fields: tuple[tuple[str, str | None], ...]
    found_on: str


class FormReader(HTMLParser):
    """Collect each form's method, action and fields, and every link's target."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, str, list[tuple[str, str | None]]]] = []
        self.links: list[str] = []
        self._select: str | None = None
        self._chosen: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "a" and "href" in found:
            self.links.append(found["href"])
        elif tag == "form":
            method = found.get("method", "get").upper()
            self.forms.append((method, found.get("action", ""), []))
        elif not self.forms or "name" not in found:
            if tag == "option" and self._select is not None and self._chosen is None:
                self._chosen = found.get("value", "")
        elif tag == "input" and found.get("type") not in ("file", "image"):
            kind = found.get("type", "text")
            if kind not in ("checkbox", "radio"):
                self._field(found["name"], found.get("value", ""))
            elif "checked" in found:
                self._field(found["name"], found.get("value", "on"))
            else:
                self._field(found["name"], None)
        elif tag == "button" and found.get("type", "submit") == "submit":
            self._field(found["name"], found.get("value", ""))
        elif tag == "select":
            self._select, self._chosen = found["name"], None
        elif tag == "textarea":
            self._textarea = found["name"]
            self._field(found["name"], "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self._select is not None:
            self._field(self._select, self._chosen or "")
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def _field(self, name: str, value: str | None) -> None:
        fields = self.forms[-1][2]
        for index, (existing, offered) in enumerate(fields):
            if existing == name:
                if offered is None:  # a later ticked box or radio of the group
                    fields[index] = (name, value)
                return
        fields.append((name, value))


def _fetched(client: Client, path: str) -> HttpResponseBase:
    response = client.get(path)
    if isinstance(response, StreamingHttpResponse):
        response.close()
    return response


def _route_name(path: str) -> str:
    try:
        match = resolve(urlsplit(path).path)
    except Resolver404:
        return ""
    return match.view_name or ""


def _page_targets(page_path: str, name: str, html: str) -> Iterator[Target]:
    reader = FormReader()
    reader.feed(html)
    stock_admin = name.startswith("admin:") and name.endswith(STOCK_ADMIN_PAGES)
    for method, action, fields in reader.forms:
        target = urljoin(page_path, action) if action else page_path
        if stock_admin or _route_name(target) in SKIPPED_ACTIONS:
            continue
        parts = urlsplit(target)
        in_action = parse_qsl(parts.query, keep_blank_values=True)
        offered: tuple[tuple[str, str | None], ...] = (*in_action, *fields)
        yield Target(method, parts.path, offered, f"form on {page_path}")
    names: set[str] = set()
    for link in reader.links:
        parts = urlsplit(urljoin(page_path, link))
        if parts.path == urlsplit(page_path).path and parts.query:
            names.update(key for key, _ in parse_qsl(parts.query, True))
    if names and not stock_admin:
        # Each alone: an empty companion (a date hierarchy's day) would be refused
        # before the fuzzed one is read.
        alone = tuple((key, None) for key in sorted(names))
        yield Target("GET", urlsplit(page_path).path, alone, f"links on {page_path}")


def _changelist_name(model: Any) -> str:
    return f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"


def _changelist_parameters(client: Client, model: Any) -> set[str]:
    response = client.get(reverse(_changelist_name(model)))
    changelist = (response.context or {}).get("cl")
    if changelist is None:
        return set()  # a page of its own instead of the stock list
    names = {SEARCH_VAR, ORDER_VAR, PAGE_VAR}
    for spec in changelist.filter_specs:
        names.update(spec.expected_parameters())
    if changelist.date_hierarchy:
        field = changelist.date_hierarchy
        names.update(f"{field}__{part}" for part in ("year", "month", "day"))
    return names


def discover(library: SmallLibrary, client: Client) -> list[Target]:
    """Return every request shape the site offers a superuser."""
    targets: dict[tuple[str, str, tuple[str, ...]], Target] = {}

    def add(target: Target) -> None:
        key = (target.method, target.path, tuple(sorted(map(str, target.fields))))
        targets.setdefault(key, target)

    walked = routes(library).routes
    paths = {route.name: route.path for route in walked}
    letter = str(library.dead_letter.pk)
    for name, method, fields in DECLARED:
        offered = tuple((n, v.format(dead_letter=letter)) for n, v in fields.items())
        add(Target(method, paths[name], offered, "declared"))
    for route in walked:
        response = _fetched(client, route.path)
        if not (response.status_code == 200 and isinstance(response, HttpResponse)):
            continue
        if response.get("Content-Type", "").startswith("text/html"):
            html = response.content.decode(errors="replace")
            for target in _page_targets(route.path, route.name, html):
                add(target)
    for model in admin.site._registry:
        if not model._meta.managed:
            continue
        url = reverse(_changelist_name(model))
        names = _changelist_parameters(client, model)
        add(Target("GET", url, tuple((n, None) for n in sorted(names)), "changelist"))
    return list(targets.values())


def _encoded(fields: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(name)}={value}" for name, value in fields)


def _send(client: Client, target: Target, name: str, values: list[str]) -> int:
    kept = [(n, quote(v)) for n, v in target.fields if n != name and v is not None]
    encoded = _encoded([*kept, *((name, value) for value in values)])
    if target.method == "GET":
        response = client.get(f"{target.path}?{encoded}")
    else:
        response = client.generic(
            "POST",
            target.path,
            encoded,
            content_type="application/x-www-form-urlencoded",
        )
    if isinstance(response, StreamingHttpResponse):
        response.close()
    return response.status_code


@pytest.fixture
def library(redis_client) -> SmallLibrary:
    return small_library()


def cases(targets: list[Target]) -> Iterator[tuple[Target, str]]:
    """Yield each (target, field to fuzz) once: a page's links and its changelist
    often name the same parameter, sent alone to the same path."""
    seen = set()
    for target in targets:
        for name, _ in target.fields:
            sent = tuple(f for f in target.fields if f[0] != name and f[1] is not None)
            case = (target.method, target.path, name, sent)
            if name not in NOT_FIELDS and case not in seen:
                seen.add(case)
                yield target, name


def fuzzed_names(targets: list[Target]) -> set[str]:
    return {name for target in targets for name, _ in target.fields}


def test_no_field_or_parameter_answers_hostile_input_with_a_500(library):
    client = signed_in(library.staff, raise_errors=False)
    failures = []
    for target, name in cases(discover(library, client)):
        for label, values in HOSTILE.items():
            status = _send(client, target, name, values)
            if status >= 500:
                failures.append(
                    f"{target.method} {target.path} {name}={label}: {status}"
                )
    assert failures == []
    assert client.get("/admin/").status_code == 200  # still signed in at the end


# --- the walk finds what the views read --------------------------------------------


def _request_data(node: ast.AST) -> bool:
    # request.GET / request.POST, also inside "request.POST or None" and "a if b".
    return any(
        isinstance(inner, ast.Attribute)
        and inner.attr in ("GET", "POST")
        and isinstance(inner.value, ast.Name)
        and inner.value.id == "request"
        for inner in ast.walk(node)
    )


def read_by_name() -> set[str]:
    """Return every parameter the apps read by name or through a bound form."""
    names: set[str] = set()
    for path in (ROOT / app for app in APPS):
        for source in path.rglob("*.py"):
            if "tests" in source.parts or "migrations" in source.parts:
                continue
            tree = ast.parse(source.read_text())
            module = ".".join(source.relative_to(ROOT).with_suffix("").parts)
            names |= _names_in(tree, module)
    return names


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(keyword.value for keyword in call.keywords)]


def _names_in(tree: ast.AST, module: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("get", "getlist")
            and _request_data(func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value))
        elif isinstance(func, ast.Name) and any(
            _request_data(arg)
            for arg in [*node.args, *(k.value for k in node.keywords)]
        ):
            bound = getattr(importlib.import_module(module), func.id, None)
            if isinstance(bound, type) and issubclass(bound, forms.Form):
                names.update(bound.base_fields)
    return names


def test_every_parameter_a_view_reads_is_fuzzed(library):
    client = signed_in(library.staff, raise_errors=False)
    read = read_by_name()
    assert {"version", "lastEventId", "month", "q", "window", "reason"} <= read
    assert read - fuzzed_names(discover(library, client)) == set()


# --- the five the review found ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/admin/jobs/jobstatus/?kind=%00",
        "/admin/jobs/jobstatus/?state=%00",
        "/admin/messaging/delivery/?status=%00",
        "/admin/messaging/delivery/?subscription=%00",
        "/branches/1/books/?q=rose%00",
        "/course/source/library%00/models.py",
    ],
)
def test_a_nul_byte_is_a_400(library, url):
    client = signed_in(library.staff, raise_errors=False)
    assert client.get(url).status_code == 400


def test_a_nul_byte_in_a_form_field_is_a_400(library):
    client = signed_in(library.staff, raise_errors=False)
    form = {"month": "2025-03\x00", "branch": "", "chunk": "500", "pause_ms": "0"}
    assert client.post("/jobs/reports/monthly/", form).status_code == 400


def test_the_last_month_a_date_can_end_is_refused_on_the_form(library):
    client = signed_in(library.staff, raise_errors=False)
    form = {"month": "9999-12", "branch": "", "chunk": "500", "pause_ms": "0"}
    answer = client.post("/jobs/reports/monthly/", form)
    assert answer.status_code == 400
    assert "Give a month like 2025-03." in answer.content.decode()

"""Which anonymous pages the page tier keeps, and under which key.

The branch is the tenant, and the full path and query are the criteria. A book page
names the book's version in its key; a catalogue page depends on the branch's list or
search generation. The hottest page kind is split into ``HOT_COPIES`` keys.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.urls import Resolver404, resolve

from library.cache import reads
from library.cache.keys import KeySpec
from library.cache.reads import LIST, SEARCH
from library.cache.store import generation_key
from library.models import Book

PAGE: Final = KeySpec(namespace="page", operation="http", schema_version=3)
HOT_COPIES: Final = 4

_rng = random.Random()


@dataclass(frozen=True)
class PageKind:
    """How one route's anonymous page is keyed and how long it lives."""

    # (request, view kwargs) -> (key, dependency), or None when the page cannot be
    # keyed (no such row). The dependency is the Redis key of a generation counter
    # the page was rendered under, or None when the key itself names the version.
    key: Callable[[HttpRequest, dict[str, Any]], tuple[str, str | None] | None]
    lifetime_s: int
    jitter_s: int
    copies: Callable[[HttpRequest], int] = lambda request: 1
    # The key reads the database: only the Django middleware may look it up (the
    # ASGI front runs on the event loop, where database calls are not allowed).
    needs_database: bool = False


def _full_path(request: HttpRequest) -> str:
    return request.get_full_path()


def _catalogue_key(
    request: HttpRequest, kwargs: dict[str, Any]
) -> tuple[str, str | None]:
    tenant = reads.branch_tenant(int(kwargs["branch_id"]))
    spec = SEARCH if request.GET.get("q") else LIST
    key = PAGE.key(
        tenant=tenant, criteria={"view": "branch-books", "path": _full_path(request)}
    )
    return key, generation_key(spec.namespace, tenant)


def _stock_list_key(
    request: HttpRequest, kwargs: dict[str, Any]
) -> tuple[str, str | None]:
    tenant = reads.branch_tenant(int(kwargs["branch_id"]))
    key = PAGE.key(
        tenant=tenant, criteria={"view": "branch-stock", "path": _full_path(request)}
    )
    return key, generation_key(LIST.namespace, tenant)


def _book_key(
    request: HttpRequest, kwargs: dict[str, Any]
) -> tuple[str, str | None] | None:
    # The version is read from the database, as the data tier does: it is bumped in
    # the change's own transaction, so the key can never name an older page.
    current = (
        Book.objects.filter(pk=int(kwargs["book_id"]))
        .values_list("branch_id", "version", "updated_at")
        .first()
    )
    if current is None:
        return None
    branch_id, version, updated_at = current
    key = PAGE.key(
        tenant=reads.branch_tenant(branch_id),
        criteria={
            "view": "book-detail",
            "v": version,
            "u": int(updated_at.timestamp() * 1_000_000),
            "path": _full_path(request),
        },
    )
    return key, None


def _first_catalogue_page(request: HttpRequest) -> int:
    # Every visitor of a branch lands on its first, unsearched page: the hot key.
    plain = not request.GET or (
        set(request.GET) == {"page"} and request.GET["page"] == "1"
    )
    return HOT_COPIES if plain else 1


PAGES: Final[dict[str, PageKind]] = {
    "branch-books": PageKind(
        key=_catalogue_key, lifetime_s=60, jitter_s=15, copies=_first_catalogue_page
    ),
    "branch-stock": PageKind(key=_stock_list_key, lifetime_s=60, jitter_s=15),
    "book-detail": PageKind(
        key=_book_key, lifetime_s=600, jitter_s=120, needs_database=True
    ),
}


class PageLookup(NamedTuple):
    key: str
    kind: PageKind
    dependency: str | None


def may_be_page(request: HttpRequest) -> bool:
    """Cheap first look, without I/O: a GET of a route the tier covers."""
    if request.method != "GET":
        return False
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    return (match.url_name or "") in PAGES


def page_key(request: HttpRequest, *, no_database: bool = False) -> PageLookup | None:
    """Return where the page tier keeps this request's page, or None: do not use it.

    Anything the rest of the stack must see first is left to it: a plain-HTTP
    request that the security middleware will redirect, a Host that is not
    allowed (Django answers 400), a session or a flash message.
    """
    if request.method != "GET":
        return None
    if settings.SECURE_SSL_REDIRECT and not request.is_secure():
        return None
    try:
        request.get_host()
    except DisallowedHost:
        return None
    cookies = request.COOKIES
    if settings.SESSION_COOKIE_NAME in cookies or "messages" in cookies:
        return None
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return None
    kind = PAGES.get(match.url_name or "")
    if kind is None or (no_database and kind.needs_database):
        return None
    keyed = kind.key(request, match.kwargs)
    if keyed is None:
        return None
    key, dependency = keyed
    copies = kind.copies(request)
    if copies > 1:
        key = f"{key}#c{_rng.randrange(copies)}"
    return PageLookup(key, kind, dependency)

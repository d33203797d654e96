"""Which anonymous pages the page tier keeps, and under which key.

The branch is the tenant (the library as a whole for the home page, which adds up
every branch), and the path and the parameters the page reads are the criteria. A
book page names the book's version in its key, read from the book's version record
in Redis (``library.cache.reads.versions``), so a hit asks the database nothing; a
catalogue page depends on the branch's list or search generation; the home page
only ages. The hottest page kind is split into ``HOT_COPIES`` keys.

Only the parameters a page reads are in its key, each in its canonical form, so a
parameter the page ignores (``utm_source``, a cache buster) cannot make a key of its
own: a stream of unique junk would otherwise grow Redis without bound. The path is
keyed in its canonical form too: the route's ``<int:...>`` takes ``/books/007/`` as
book 7, so the key names the path ``reverse`` gives for the matched arguments, never
the path as sent. Such a request (an extra parameter, a padded number, a search in
other ASCII capitals) may still be served the page's entry, but its own rendering is
never kept, because the body echoes the full path (the sign-in link's ``next``) and
would carry the junk to every later visitor. A value the tier does not model
(``page=0``, a repeated parameter, an over-long search) leaves the request to the
view untouched.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, cast

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.forms import CharField
from django.http import HttpRequest
from django.urls import Resolver404, resolve, reverse

from library.cache.keys import KeySpec
from library.cache.reads import (
    LIST,
    SEARCH,
    BookVersion,
    book_version_current,
    book_version_parse,
    search_canonical,
    specs,
)
from library.cache.store import generation_key
from library.forms import BookSearchForm

# Schema 4: the criteria are the canonical parameters, no longer the raw query.
PAGE: Final = KeySpec(namespace="page", operation="http", schema_version=4)
HOT_COPIES: Final = 4

_rng = random.Random()

# A parameter's canonical value: "" when it asks what its absence asks, None when
# the tier does not model the value (the view may read it another way).
Canonical = Callable[[str], str | None]
# The canonical parameters of one request, by name.
Query = Mapping[str, str]

# The form's own limit, so the two cannot drift apart.
_SEARCH_MAX: Final = cast(CharField, BookSearchForm.base_fields["q"]).max_length or 0
# A page number as the site's own links write it. Paginator.get_page turns anything
# else into some page (a junk value into the first, 0 into the last), which is not
# worth modelling: those requests go to the view.
_PAGE_NUMBER: Final = re.compile(r"[1-9][0-9]{0,5}")


def _search_text(value: str) -> str | None:
    # As BookSearchForm cleans it; an over-long query is the view's to handle.
    text = value.strip()
    return search_canonical(text) if len(text) <= _SEARCH_MAX else None


def _page_number(value: str) -> str | None:
    if _PAGE_NUMBER.fullmatch(value) is None:
        return None
    return "" if value == "1" else value  # page 1 is the page without a number


@dataclass(frozen=True)
class VersionRecord:
    """The version record a page's key names (``library.cache.reads.versions``)."""

    # view kwargs -> the record's Redis key (the ASGI front reads it itself)
    key: Callable[[dict[str, Any]], str]
    # view kwargs -> the current version: the record, or the database when the
    # record is missing (then written back). Sync: the Django middleware's.
    load: Callable[[dict[str, Any]], BookVersion | None]
    parse: Callable[[object], BookVersion | None] = book_version_parse


# (canonical path, view kwargs, canonical query, version record) -> (key,
# dependency), or None when the page cannot be keyed (no such row). The dependency
# is the Redis key of a generation counter the page was rendered under, or None
# when the key itself names the version.
KeyBuilder = Callable[
    [str, dict[str, Any], Query, BookVersion | None], tuple[str, str | None] | None
]


@dataclass(frozen=True)
class PageKind:
    """How one route's anonymous page is keyed and how long it lives."""

    key: KeyBuilder
    lifetime_s: int
    jitter_s: int
    copies: Callable[[Query], int] = lambda query: 1
    # The parameters the view reads, each with its canonical form; any other
    # parameter is ignored by the view, so it is kept out of the key.
    params: Mapping[str, Canonical] = field(default_factory=dict)
    # The key names a row's version, read from its record first.
    record: VersionRecord | None = None
    # How long past its lifetime a copy may still be served by the ASGI front while
    # one process renders the page afresh in the background (0: never; a page that
    # only ages, with nothing to retire it, is the one kind worth it).
    stale_s: int = 0


def _criteria(path: str, view: str, query: Query) -> dict[str, str | int | None]:
    # The "p." prefix keeps a parameter named "view" or "path" from replacing those.
    criteria: dict[str, str | int | None] = {"view": view, "path": path}
    criteria.update({f"p.{name}": value for name, value in query.items()})
    return criteria


def _catalogue_key(
    path: str, kwargs: dict[str, Any], query: Query, record: BookVersion | None
) -> tuple[str, str | None]:
    tenant = specs.branch_tenant(int(kwargs["branch_id"]))
    spec = SEARCH if query.get("q") else LIST
    key = PAGE.key(tenant=tenant, criteria=_criteria(path, "branch-books", query))
    return key, generation_key(spec.namespace, tenant)


def _stock_list_key(
    path: str, kwargs: dict[str, Any], query: Query, record: BookVersion | None
) -> tuple[str, str | None]:
    tenant = specs.branch_tenant(int(kwargs["branch_id"]))
    key = PAGE.key(tenant=tenant, criteria=_criteria(path, "branch-stock", query))
    return key, generation_key(LIST.namespace, tenant)


def _book_key(
    path: str, kwargs: dict[str, Any], query: Query, record: BookVersion | None
) -> tuple[str, str | None] | None:
    # The version comes from the book's version record (read before the key is
    # built, see ``PageKind.record``), which names the committed version: the key
    # never names an older page than the book's record, and a rendering of another
    # version is never stored under it (``stored.shows_the_page_asked``).
    if record is None:
        return None
    key = PAGE.key(
        tenant=specs.branch_tenant(record.branch_id),
        criteria={
            **_criteria(path, "book-detail", query),
            "v": record.version,
            "u": record.updated_us,
        },
    )
    return key, None


def _home_key(
    path: str, kwargs: dict[str, Any], query: Query, record: BookVersion | None
) -> tuple[str, str | None]:
    # Every branch's figures: no event retires them, the short lifetime ages them.
    key = PAGE.key(
        tenant=specs.library_tenant(), criteria=_criteria(path, "home", query)
    )
    return key, None


def _book_record(kwargs: dict[str, Any]) -> str:
    return specs.book_record(int(kwargs["book_id"]))


def _book_load(kwargs: dict[str, Any]) -> BookVersion | None:
    return book_version_current(int(kwargs["book_id"]))


def _first_catalogue_page(query: Query) -> int:
    # Every visitor of a branch lands on its first, unsearched page: the hot key.
    plain = not any(query.values())
    return HOT_COPIES if plain else 1


PAGES: Final[dict[str, PageKind]] = {
    "branch-books": PageKind(
        key=_catalogue_key,
        lifetime_s=60,
        jitter_s=15,
        copies=_first_catalogue_page,
        params={"q": _search_text, "page": _page_number},
    ),
    "branch-stock": PageKind(key=_stock_list_key, lifetime_s=60, jitter_s=15),
    # The landing page: the sum of every branch's stock, as old as a branch's
    # figures may be (``CACHE_STOCK_FRESH_S``, 5 s by default) plus this lifetime.
    # Past it, the front serves the copy it has while one request's worth of
    # rendering happens off every visitor's path (``stale_s``).
    "home": PageKind(key=_home_key, lifetime_s=5, jitter_s=1, stale_s=25),
    "book-detail": PageKind(
        key=_book_key,
        lifetime_s=600,
        jitter_s=120,
        record=VersionRecord(key=_book_record, load=_book_load),
    ),
}


class PageLookup(NamedTuple):
    key: str
    kind: PageKind
    dependency: str | None
    # False when the request held more than the canonical query: its page may be
    # served from the entry but its own rendering echoes the extra and is not kept.
    storable: bool = True
    # The canonical parameters the key was built from, to check the rendering
    # against (``stored.shows_the_page_asked``).
    query: tuple[tuple[str, str], ...] = ()
    # The version the key names (``BookVersion.token``), for a kind with a record:
    # a rendering of any other version is not stored under this key.
    version: str | None = None


class PageRoute(NamedTuple):
    """A request the tier covers, before its key is built (no I/O so far)."""

    kind: PageKind
    path: str  # canonical
    kwargs: dict[str, Any]
    query: dict[str, str]  # canonical
    storable: bool


def _canonical_query(
    request: HttpRequest, params: Mapping[str, Canonical]
) -> tuple[dict[str, str], bool] | None:
    """Return the canonical parameters and whether the request held only them.

    None when a value is one the tier does not model: the request is the view's.
    """
    query: dict[str, str] = {}
    exact = True
    for name, values in request.GET.lists():
        canonical = params.get(name)
        if canonical is None:
            exact = False  # the view ignores it, so the key does too
            continue
        if len(values) != 1:
            return None  # the view reads the last one; not worth modelling
        value = canonical(values[0])
        if value is None:
            return None
        exact = exact and value == values[0]
        query[name] = value
    return query, exact


def may_be_page(request: HttpRequest) -> bool:
    """Cheap first look, without I/O: a GET of a route the tier covers."""
    if request.method != "GET":
        return False
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    return (match.url_name or "") in PAGES


def page_route(request: HttpRequest) -> PageRoute | None:
    """Return the route of a request the tier may answer, or None: do not use it.

    No I/O. Anything the rest of the stack must see first is left to it: a
    plain-HTTP request that the security middleware will redirect, a Host that is
    not allowed (Django answers 400), a session or a flash message.
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
    if kind is None:
        return None
    canonical = _canonical_query(request, kind.params)
    if canonical is None:
        return None
    query, storable = canonical
    # The path the site's own links use for these arguments ("/books/7/" for a
    # request of "/books/007/"): the key's, so padded numbers make no entry.
    path = reverse(match.url_name, kwargs=match.kwargs)
    storable = storable and path == request.path
    return PageRoute(kind, path, match.kwargs, query, storable)


def route_lookup(route: PageRoute, record: BookVersion | None) -> PageLookup | None:
    """Return where the tier keeps the route's page, given its version record (None
    for a kind without one); None when it cannot be keyed (no such row)."""
    keyed = route.kind.key(route.path, route.kwargs, route.query, record)
    if keyed is None:
        return None
    key, dependency = keyed
    copies = route.kind.copies(route.query)
    if copies > 1:
        key = f"{key}#c{_rng.randrange(copies)}"
    return PageLookup(
        key,
        route.kind,
        dependency,
        route.storable,
        tuple(route.query.items()),
        None if record is None else record.token,
    )


def page_key(request: HttpRequest) -> PageLookup | None:
    """Return where the page tier keeps this request's page, or None: do not use it.

    Sync: a version record is read (or loaded from the database) on the spot.
    """
    route = page_route(request)
    if route is None:
        return None
    record = None
    if route.kind.record is not None:
        record = route.kind.record.load(route.kwargs)
        if record is None:
            return None  # no such row: the view answers 404
    return route_lookup(route, record)

"""Drill: a hot book page whose cache entry expires under load.

Seeding (in the sandbox): the library's most borrowed book becomes everyone's read.
Its page is read by a crowd of concurrent readers, through the site's own cached
read (``library.cache.reads.book_detail``), around several expiries of its entry.
Each expiry lands in the crowd: one reader goes to the database and the others wait
for it (single-flight) or give up waiting and go too. The cache's own counters
(*Cache metrics*, namespace ``book``) record it: misses and single-flight waits
climbing with every expiry.

The lever: the Books admin's action that marks the book hot (``library.cache.hot``):
its page is then served stale while one reader refreshes it in the background.

The checker recreates the moment of an expiry: it brings the book's entry to the
end of its fresh time (a cache-aside entry is deleted, as its lifetime would; a hot
entry's fresh-until stamp is moved into the past, as time would) and sends a crowd
of readers at once. Passed when every reader was answered from the cache without
waiting, and the page shows the book's current shelf count.
"""

from __future__ import annotations

import threading
import time
from typing import Final, cast

from django.db import connections
from django.db.models import Count

from course.drills.incidents.common import Findings, Verdict
from library.cache.hot import book_is_hot, hot_marks_reload
from library.cache.metrics import cache_redis, metrics_flush, metrics_read
from library.cache.reads import BOOK, book_detail, branch_tenant
from library.cache.store import decode, encode, local_tier, refreshes_wait
from library.models import Book

READERS: Final = 24
ROUNDS: Final = 6
# The counters are minute buckets summed over a window that slides with the clock:
# a day, so that no bucket with events in it (the seed's) leaves the window between
# the checker's two readings and the difference is the burst's own.
WINDOW_MINUTES: Final = 24 * 60
COUNTED: Final = (
    "misses",
    "origin_calls",
    "singleflight_saved",
    "singleflight_fallbacks",
)


def hot_book() -> Book:
    """The book the incident is about: the most borrowed one."""
    book = (
        Book.objects.annotate(n=Count("loans")).order_by("-n", "id").first()
        or Book.objects.order_by("id").first()
    )
    assert book is not None, "the sandbox has no books"
    return book


def _key(book: Book, *, hot: bool) -> str:
    """The data tier's key of the book's page, as ``book_detail`` builds it."""
    criteria = {
        "id": book.pk,
        "v": book.version,
        "u": int(book.updated_at.timestamp() * 1_000_000),
    }
    if hot:
        criteria["hot"] = 1
    return BOOK.key(tenant=branch_tenant(book.branch_id), criteria=criteria)


def _crowd(book_id: int, readers: int) -> list[int]:
    """Send ``readers`` readers of the book's page at once; return the shelf counts."""
    gate = threading.Barrier(readers)
    seen: list[int] = []
    lock = threading.Lock()

    def read() -> None:
        try:
            gate.wait()
            cached = book_detail(book_id=book_id)
            if cached is not None:
                with lock:
                    seen.append(cached.book.on_shelf)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen


def _expire(book: Book) -> str:
    """Bring the book's entry to the end of its fresh time; return which kind."""
    local_tier.clear()
    hot_marks_reload()  # the marks as they are now, not as this process last read
    if not book_is_hot(book.pk):
        cache_redis().delete(_key(book, hot=False))
        return "cache-aside"
    key = _key(book, hot=True)
    if cache_redis().get(key) is None:
        book_detail(book_id=book.pk)  # a hot entry starts with a read
        refreshes_wait()
    raw = cache_redis().get(key)
    if raw is not None:
        entry = decode(cast(bytes, raw))
        entry["f"] = int(time.time() * 1000) - 1
        cache_redis().set(key, encode(entry), keepttl=True)
    return "hot"


def _counts() -> dict[str, int]:
    metrics_flush()
    report = metrics_read(WINDOW_MINUTES).get(BOOK.namespace)
    if report is None:
        return dict.fromkeys(COUNTED, 0)
    return {name: int(report[name]) for name in COUNTED}  # type: ignore[literal-required]


def seed() -> dict[str, str]:
    book = hot_book()
    ordinary = list(Book.objects.exclude(pk=book.pk).order_by("id")[:40])
    for n in range(ROUNDS):
        for other in ordinary[n::ROUNDS]:
            book_detail(book_id=other.pk)
        _expire(book)
        _crowd(book.pk, READERS)
    metrics_flush()
    return {"The book everyone reads": f"“{book.title}” (book #{book.pk})"}


def check() -> Verdict:
    found = Findings()
    book = hot_book()
    kind = _expire(book)
    before = _counts()
    seen = _crowd(book.pk, READERS)
    refreshes_wait()
    after = _counts()
    missed, origin, waited, fell_back = (after[n] - before[n] for n in COUNTED)
    found.add(
        missed == 0,
        f"At the expiry, all {READERS} readers of “{book.title}” were answered from "
        "the cache at once: the stale page served them while one refresh ran in "
        "the background.",
        f"At the expiry ({kind} entry), {missed} of {READERS} readers of "
        f"“{book.title}” found no entry and waited for the database "
        f"({origin} trip(s) to it"
        + (f", {waited} reader(s) queued behind another's" if waited else "")
        + (f", {fell_back} gave up queueing" if fell_back else "")
        + "). Every expiry under load stalls its readers again.",
    )
    current = Book.objects.values_list("on_shelf", flat=True).get(pk=book.pk)
    found.add(
        len(seen) == READERS and set(seen) == {current},
        f"Every reader saw the current shelf count ({current}).",
        f"Some readers saw a shelf count other than the current {current}: {seen}.",
    )
    return found.verdict()

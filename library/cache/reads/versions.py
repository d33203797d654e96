"""The book's version record: what the book page's key needs, without the database.

The page tier keys a book page by the book's version (and ``updated_at``, see the
package doc). Read from the database, that is one query on every hit, about as
much as the rest of the hit; read from this record, it is one Redis GET.

Who writes it:

1. the change's own commit hook (``book_version_announce``, called by the services
   in ``transaction.on_commit``): before the loan's response leaves, so the next
   request anywhere sees the new version;
2. a reader that found no record (``book_version_current``): it reads the database
   and advances the record, which refuses a version lower than the stored one, so a
   reader that read version 1 before a loan committed cannot overwrite the loan's 2;
3. the event's ``cache_invalidation`` subscriber (``change_invalidate`` with the
   book, in the branch's invalidation pipeline): it deletes a record older than the
   message's version, which covers a commit hook that met a Redis error; that
   delivery is retried until Redis answers.

A record that every writer missed (its hook failed and its event is not delivered
yet, or the database was re-created under a live Redis, whose versions start again
at 1) stays behind at most ``BOOK_RECORD_LIFETIME_S``.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple

import redis

from library.cache.metrics import cache_redis, redis_failed, redis_usable
from library.cache.reads import specs
from library.cache.reads.specs import BOOK, BOOK_RECORD_LIFETIME_S
from library.cache.store.versions import version_advance, version_parse
from library.models import Book


class BookVersion(NamedTuple):
    """What the book page's key names: the book's tenant and exact version."""

    branch_id: int
    version: int
    updated_us: int

    @property
    def token(self) -> str:
        """The version as the page tier compares it with a rendering."""
        return f"{self.version}:{self.updated_us}"


def _micros(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def book_version_of(book: Book) -> BookVersion:
    """Return the version a loaded (or cached) book row shows."""
    return BookVersion(book.branch_id, book.version, _micros(book.updated_at))


def book_version_parse(raw: object) -> BookVersion | None:
    """Return the version a stored record holds; None if absent or damaged."""
    parsed = version_parse(raw)
    if parsed is None:
        return None
    version, payload = parsed
    branch, _, updated = payload.partition(":")
    if not branch.isdigit() or not updated.isdigit():
        return None
    return BookVersion(int(branch), version, int(updated))


def _advance(book_id: int, current: BookVersion) -> None:
    version_advance(
        specs.book_record(book_id),
        current.version,
        f"{current.branch_id}:{current.updated_us}",
        lifetime_s=BOOK_RECORD_LIFETIME_S,
    )


def book_version_announce(
    *, book_id: int, branch_id: int, version: int, updated_at: datetime.datetime
) -> None:
    """Advance the book's record to a committed change; call from ``on_commit``.

    A Redis error is counted and logged, never raised: the change has committed and
    its answer must go out. Its event's subscriber retires the old record later.
    """
    if not redis_usable():
        return
    try:
        _advance(book_id, BookVersion(branch_id, version, _micros(updated_at)))
    except redis.RedisError as error:
        redis_failed(error, namespace=BOOK.namespace, during="version announce")


def book_version_from_database(book_id: int) -> BookVersion | None:
    """Return the book's committed version from the database; None: no such book."""
    current = (
        Book.objects.filter(pk=book_id)
        .values_list("branch_id", "version", "updated_at")
        .first()
    )
    if current is None:
        return None
    branch_id, version, updated_at = current
    return BookVersion(branch_id, version, _micros(updated_at))


def book_version_current(book_id: int) -> BookVersion | None:
    """Return the book's version: the record, or the database (then the record).

    Call outside ``atomic()``. A Redis error falls back to the database.
    """
    if redis_usable():
        try:
            found = book_version_parse(cache_redis().get(specs.book_record(book_id)))
        except redis.RedisError as error:
            redis_failed(error, namespace=BOOK.namespace, during="version read")
            return book_version_from_database(book_id)
        if found is not None:
            return found
    current = book_version_from_database(book_id)
    if current is not None and redis_usable():
        try:
            _advance(book_id, current)
        except redis.RedisError as error:
            redis_failed(error, namespace=BOOK.namespace, during="version write")
    return current

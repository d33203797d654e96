"""Invalidation, called by the cache_invalidation subscription."""

from __future__ import annotations

# Tenants are looked up through their module (``specs.branch_tenant``), never bound
# at import, so a test that replaces them there reaches this code.
from library.cache.reads import specs
from library.cache.reads.branches import branch_key
from library.cache.reads.specs import HISTORY, LIST, SEARCH
from library.cache.store import generations_bump


def change_invalidate(
    branch_id: int,
    member_id: int | None = None,
    *,
    book: tuple[int, int] | None = None,
) -> None:
    """Retire what a change at the branch made stale, in one Redis round trip.

    The branch's list and search generations are bumped and its stock page deleted;
    with a member, that member's history generation too; with ``book`` (its id and
    its version after the change), its version record if older (``versions``: the
    commit hook normally got there first). Raises on a Redis error, so the caller's
    delivery is retried.

    The stock page is deleted, not written through: rebuilding it (totals and the
    busiest books over all loans) on every loan made a burst of loans rebuild it once
    per loan inside the drain, which the outbox benchmark measured as a large share
    of the drain's time; the next reader rebuilds it once, behind single-flight.
    """
    tenant = specs.branch_tenant(branch_id)
    generations = [(LIST.namespace, tenant), (SEARCH.namespace, tenant)]
    if member_id is not None:
        generations.append((HISTORY.namespace, specs.member_tenant(member_id)))
    retire = () if book is None else ((specs.book_record(book[0]), book[1]),)
    generations_bump(generations, delete=(branch_key(branch_id),), retire_below=retire)

"""The key specs, lifetimes and tenants of the cached reads.

Callers reach the tenants through this module (``specs.branch_tenant``), so that a
test replacing them here changes every key built afterwards.
"""

from __future__ import annotations

from typing import Final

from library.cache.keys import KeySpec

BOOK: Final = KeySpec(namespace="book", operation="detail")
STOCK: Final = KeySpec(namespace="stock", operation="branch")
LIST: Final = KeySpec(namespace="list", operation="books")
SEARCH: Final = KeySpec(namespace="search", operation="books")
HISTORY: Final = KeySpec(namespace="history", operation="loans")

BOOK_LIFETIME_S: Final = 60 * 60
BOOK_JITTER_S: Final = 10 * 60
BOOK_LOCAL_S: Final = 2.0
# A branch's shelf counts are fresh for settings.CACHE_STOCK_FRESH_S (5 s unless
# configured), then served stale for this long while one request refreshes them.
STOCK_STALE_S: Final = 30.0
# The generation retires list pages at once; the lifetime only bounds how long a
# change that published no event (an admin edit of a title) stays invisible.
LIST_LIFETIME_S: Final = 120
LIST_JITTER_S: Final = 30
# A book's version record (``versions``): how long one no writer reached may stay
# behind (a commit hook that met a Redis error, a database re-created under a live
# Redis). Every loan rewrites it; a hit never needs it longer.
BOOK_RECORD_LIFETIME_S: Final = 300
HISTORY_LIFETIME_S: Final = 300
HISTORY_JITTER_S: Final = 60


def branch_tenant(branch_id: int) -> str:
    """Return the tenant of everything that belongs to one branch."""
    return f"branch-{branch_id}"


def library_tenant() -> str:
    """Return the tenant of figures that add up every branch (the home page's)."""
    return "library"


def member_tenant(member_id: int) -> str:
    """Return the tenant of one member's own data (never shared with another)."""
    return f"member-{member_id}"


def book_record(book_id: int) -> str:
    """Return the Redis key of one book's version record (``versions``)."""
    return f"version:book:{book_id}"

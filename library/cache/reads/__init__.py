"""The cached reads of the library's pages: each wraps one origin selector.

What is cached where (every key comes from ``KeySpec``; the tenant is the branch,
or the member for a member's own history):

========== =============================== ======================= =================
namespace  key                             strategy                lifetime
========== =============================== ======================= =================
book       book:s1:g1:tbranch-B:detail:    cache-aside, local tier 1 h + [0, 10 min)
           id=N&u=<updated µs>&v=<ver>     2 s, single-flight      jitter, 24 h cap
stock      stock:s1:g1:tbranch-B:branch    stale-while-revalidate  5 s fresh +
                                           retired by              30 s stale
                                           cache_invalidation
stock      stock:s1:g1:tlibrary:branch:    stale-while-revalidate  as above
           view=overview                   (every branch; ages,
                                           never retired)
list       list:s1:gG:tbranch-B:books:     cache-aside, generation 120 s + [0, 30 s)
           page=P                          bumped on every change
search     search:s1:gG:tbranch-B:books:   as list                 as list
           page=P&q=<text>
history    history:s1:gG:tmember-M:loans:  cache-aside, generation 300 s + [0, 60 s)
           member=M&page=P                 per member
========== =============================== ======================= =================

Why the book's key reads its version from the database (one primary-key lookup of
three columns) instead of a small version cache: the version is bumped in the same
transaction as the change, so the lookup can never be stale, and it needs no
invalidation of its own (a version cache would be one more entry that an event has
to reach). ``updated_at`` joins the version in the key because a re-created database
(a restore, a re-seed) starts versions again at 1 while its rows are new; the two
together never meet an older entry. Since the key names the exact version, a stale
entry can never be served, which is also why the in-process tier is safe here.
The page tier, which answers before the view runs, keys a book page by the same
version read from the book's version record in Redis instead (``versions``): there
the database query was most of a hit's cost, and the record is written by the
change's own commit hook.

Values are JSON (see ``library.cache.store``) and are turned back into unsaved model

One sub-module per page kind, all re-exported here: ``books``, ``branches``,
``catalogue`` (catalogue pages, search and the stock list), ``history`` and
``invalidation``; ``specs`` holds the key specs, lifetimes and tenants, ``rows`` the
helpers that rebuild rows and pages. Code in these modules calls the tenants through
``specs`` (``specs.branch_tenant``), never by a name bound at import; the submodules
never import this package, so it has no import cycle.
"""

from __future__ import annotations

from library.cache.reads.books import CachedBook, book_detail
from library.cache.reads.books import book_origin as book_origin
from library.cache.reads.branches import BranchPage, branch_page, library_overview
from library.cache.reads.catalogue import branch_books_page, branch_stock_list
from library.cache.reads.history import member_history_page
from library.cache.reads.invalidation import change_invalidate
from library.cache.reads.rows import search_canonical
from library.cache.reads.specs import (
    BOOK,
    HISTORY,
    LIST,
    SEARCH,
    STOCK,
    book_record,
    branch_tenant,
    member_tenant,
)
from library.cache.reads.specs import BOOK_JITTER_S as BOOK_JITTER_S
from library.cache.reads.specs import BOOK_LIFETIME_S as BOOK_LIFETIME_S
from library.cache.reads.specs import BOOK_LOCAL_S as BOOK_LOCAL_S
from library.cache.reads.specs import HISTORY_JITTER_S as HISTORY_JITTER_S
from library.cache.reads.specs import HISTORY_LIFETIME_S as HISTORY_LIFETIME_S
from library.cache.reads.specs import LIST_JITTER_S as LIST_JITTER_S
from library.cache.reads.specs import LIST_LIFETIME_S as LIST_LIFETIME_S
from library.cache.reads.specs import STOCK_STALE_S as STOCK_STALE_S
from library.cache.reads.versions import (
    BookVersion,
    book_version_announce,
    book_version_current,
    book_version_of,
    book_version_parse,
)

__all__ = [
    "BOOK",
    "HISTORY",
    "LIST",
    "SEARCH",
    "STOCK",
    "BookVersion",
    "BranchPage",
    "CachedBook",
    "book_detail",
    "book_record",
    "book_version_announce",
    "book_version_current",
    "book_version_of",
    "book_version_parse",
    "branch_books_page",
    "branch_page",
    "branch_stock_list",
    "branch_tenant",
    "change_invalidate",
    "library_overview",
    "member_history_page",
    "member_tenant",
    "search_canonical",
]

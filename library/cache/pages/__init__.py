"""The page tier: whole anonymous responses kept in Redis, served before the view runs.

The data tier (``library.cache.reads``) saves the origin's queries, but a request that
hits it still crosses the session, CSRF, auth and message middleware, runs the view
and renders the template: most of a request's time on this stack. The page tier keeps
the finished response of the public pages, so a hit costs a URL match, one or two
Redis reads and a copy of the bytes. It sits in the middleware list right after
WhiteNoise, so the security headers are still added on the way out.

Only what a shared cache may hold goes in, and only for visitors who share it:

- the request is a GET with no session and no messages cookie (a signed-in page names
  its user and carries a CSRF token; a flash message is one person's);
- the response is a 200 with ``public`` in its Cache-Control, sets no cookie and
  holds no CSRF token (checked on the bytes, so a template change cannot slip one in);
- the route is listed in ``PAGES`` below, with a key built by the key generator: the
  branch is the tenant, and the path and the parameters the page reads (each in its
  canonical form: ``/books/007/`` is ``/books/7/``) are the criteria; any other
  parameter is left out of the key, and a request carrying one, or spelling the path
  or a parameter another way, may be served the page but never stores its own
  rendering, which echoes the full path (the sign-in link). What retires the page is
  either in the key (a book page names the book's version, read from its version
  record in Redis, ``library.cache.reads.versions``) or stamped in the entry: a
  catalogue page records the branch's list or search generation it was rendered
  under, and the lookup reads the page and the current generation in one MGET, so
  a hit costs one Redis round trip and a bumped generation turns it into a miss;
- the response shows the page its key names: a catalogue number past the last page
  renders the last page, which the view says with ``mark_rendered_page``, and that
  rendering is served but not stored, so ``?page=N`` for every N adds no key.

A hit answers 304 by itself when the client's ``If-None-Match`` matches the stored
ETag: validators are checked before any body is touched. The stored headers are the
view's own (ETag, Last-Modified, Cache-Control, Vary, X-Frame-Options, ...), so a
hit and a miss are indistinguishable to the client apart from ``X-Page-Cache``.

Page lifetimes never exceed their data's (list pages: seconds to minutes), and the
hottest page kind (a branch's first catalogue page) is split into ``HOT_COPIES``
copies, each a key of its own, read at random, so one key's traffic is spread the
way a cluster spreads it over shards.

Sub-modules: ``keys`` (which routes are cached and under what key), ``stored`` (the
stored form and the first round trip's decision), ``middleware`` (the Django
middleware that serves and stores) and ``asgi`` (the front that serves on the event
loop); the names used elsewhere are re-exported here.
"""

from __future__ import annotations

from library.cache.pages.asgi import PageTierASGI
from library.cache.pages.keys import HOT_COPIES, PAGE, PAGES, page_key
from library.cache.pages.keys import PageKind as PageKind
from library.cache.pages.keys import PageLookup as PageLookup
from library.cache.pages.middleware import PageCacheMiddleware
from library.cache.pages.stored import mark_rendered_page, mark_rendered_version
from library.cache.pages.stored import storable as storable

__all__ = [
    "HOT_COPIES",
    "PAGE",
    "PAGES",
    "PageCacheMiddleware",
    "PageTierASGI",
    "mark_rendered_page",
    "mark_rendered_version",
    "page_key",
]

"""Lab for "HTTP Caching": validators, conditional requests and directives.

Model part. The lesson starts a small HTTP server for four library endpoints and
probes it with curl; here the same server is an in-process function from (method,
path, request headers) to (status, headers, body), and the probe calls it in the
lesson's order:

1. a plain GET of ``/book/7`` — the validators (ETag, Last-Modified) it carries;
2. the same GET unconditionally, with ``If-None-Match`` and with
   ``If-Modified-Since`` — 200 with the body, then 304 with no body;
3. a POST changes the book; the old tag no longer matches, so the body comes back;
4. the ``Cache-Control`` each endpoint sends.

``downloaded_bytes`` is what curl counts: the UTF-8 length of the body, which is
``JSON.stringify`` text without spaces, and 0 for a 304. Nothing here depends on the
network, so a socket would add only run time.

The validator functions (``etag_for``, ``is_not_modified`` and their helpers) are
pure and follow RFC 9110 rather than the lesson's shortcut: ``If-None-Match`` takes a
list or ``*`` and compares weakly, and ``If-Modified-Since`` is only looked at when
``If-None-Match`` is absent. For every request the lesson makes both rules agree.
They live in ``library/cache/http.py``, where the real views use them too.
"""

from __future__ import annotations

from course.labs.harness.base import Chart, Lab
from course.labs.http_caching import live, model
from course.labs.http_caching.model import LibraryApi, json_text
from course.labs.http_caching.params import PARAMS, HttpCachingParams

# The validators are the real system's; re-exported under their old names.
from library.cache.http import etag_for, http_date, is_not_modified

__all__ = [
    "LAB",
    "LibraryApi",
    "etag_for",
    "http_date",
    "is_not_modified",
    "json_text",
]


LAB = Lab(
    slug="http-caching",
    title="HTTP Caching",
    params=PARAMS,
    params_type=HttpCachingParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="validators",
            label="request",
            values=("downloaded_bytes",),
            title="Body bytes downloaded per request",
            unit="B",
        ),
    ),
)

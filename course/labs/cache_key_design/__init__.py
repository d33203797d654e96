"""Lab for "Cache Key Design": what a hand-built key gets wrong, and the fix.

Model part, ported from the lesson's three experiments on its seven-book catalogue
(held in an in-memory SQLite database, so searches use SQLite's own ``LIKE``):

1. ``keys`` — keys the system's generator, ``library.cache.keys.cache_key``, gives
   for the lesson's cases: two searches a colon used to merge, one list page for two
   branches, one search with its criteria in either order and a search whose
   criteria are long enough to be summarised. Extra table ``checks``: whether the
   two orders agree and how long the summarised key is.
2. ``collision`` — lookups through one cache. Hand-glued keys (``search:`` + title
   + ``:`` + author, and a list key without the branch) hand the second query the
   first one's answer; the generated keys send both to the origin and get the right
   rows. ``source`` is where the answer came from. Extra table ``leak``: how many
   titles branch 3 was shown that are not on its shelves.
3. ``cardinality`` — ``requests`` list requests cycling over three branches and two
   pages, each carrying a unique request id, cached under three key forms: the right
   fields, one field too many (the request id) and one too few (no tenant).
   ``wrong`` counts answers that differ from what the origin would return.
"""

from __future__ import annotations

from course.labs.cache_key_design import live, model
from course.labs.cache_key_design.params import PARAMS, CacheKeyDesignParams
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB"]


LAB = Lab(
    slug="cache-key-design",
    title="Cache Key Design",
    params=PARAMS,
    params_type=CacheKeyDesignParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="cardinality",
            label="key_form",
            values=("hits", "wrong"),
            title="Hits and wrong answers per key form",
        ),
        Chart(
            table="cardinality",
            label="key_form",
            values=("ratio_pct",),
            title="Hit ratio per key form",
            unit="%",
        ),
    ),
)

"""Lab for "Cache Layers": how much a read path repeats itself, and who absorbs it.

Model part, ported from the lesson's two experiments:

1. ``repetition`` — a stream of book / branch / member reads goes straight to the
   origin; the gap between requests and distinct keys is the repeated work.
2. ``chain`` — the same kind of stream passes a per-user client cache, a shared edge
   cache (shared resources only) and a server cache before the origin; each request
   is credited to the first layer that answers it.

The origin here counts reads instead of querying a database. Only the number of reads
appears in the tables, and what a read returns never steers a request to a different
layer, so an in-memory SQLite copy of the course's data would add run time and
nothing measurable. The live part (``live.py``) sends the same streams over real HTTP
to the application and counts the origin calls its server cache made.
"""

from __future__ import annotations

from course.labs.cache_layers import live, model
from course.labs.cache_layers.params import PARAMS, CacheLayersParams
from course.labs.harness.base import Chart, Lab

__all__ = ["LAB"]


LAB = Lab(
    slug="cache-layers",
    title="Cache Layers",
    params=PARAMS,
    params_type=CacheLayersParams,
    model=model.model,
    live=live.LIVE,
    charts=(
        Chart(
            table="chain",
            label="layer",
            values=("share_pct",),
            title="Share of requests answered by each layer",
            unit="%",
        ),
    ),
)

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
nothing measurable. The live part (``live``) sends the same streams over real HTTP
to the application and counts the origin calls its server cache made.
"""

from __future__ import annotations

from course.labs.cache_layers import live, model
from course.labs.harness.base import Chart, Lab, Param
from course.labs.harness.jsnum import SEED_MAX

__all__ = ["LAB"]


LAB = Lab(
    slug="cache-layers",
    title="Cache Layers",
    params=(
        Param(
            "requests",
            "int",
            600,
            "requests in each stream",
            minimum=0,
            maximum=200_000,
            work="value",
        ),
        Param(
            "users",
            "int",
            40,
            "distinct users in the chain stream",
            minimum=1,
            maximum=100_000,
        ),
        Param("seed", "int", 20250729, "generator seed", minimum=0, maximum=SEED_MAX),
        Param(
            "client_capacity",
            "int",
            4,
            "entries per user's client cache (0: the layer is off)",
            minimum=0,
            maximum=100_000,
        ),
        Param(
            "edge_capacity",
            "int",
            10,
            "entries in the shared edge cache (0: the layer is off)",
            minimum=0,
            maximum=100_000,
        ),
        Param(
            "server_capacity",
            "int",
            200,
            "entries in the server cache (0: the layer is off)",
            minimum=0,
            maximum=100_000,
        ),
    ),
    model=model.model,
    live=live.live,
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

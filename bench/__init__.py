"""Benchmarks that run this system side by side with its anchors.

``python -m bench`` runs every module named in ``BENCHMARKS``; ``python -m bench NAME``
runs one. Each module offers ``add_arguments(parser)`` and ``run(context, options)``;
see ``bench/README.md`` for what each one measures and how to read its ratios.
"""

from __future__ import annotations

BENCHMARKS: tuple[str, ...] = (
    "outbox",
    "caching",
    "partitions",
    "shedding",
    "realtime_sse",
    "broadcast",
    "class",
    "explore",
)

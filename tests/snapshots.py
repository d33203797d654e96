"""What the operator would see: every row of every table and every Redis key.

Taken before and after a lab's live run, the two must be equal: a live run works in
a sandbox of its own (course.sandbox) and leaves the operator's system as it was.
"""

from __future__ import annotations

import redis
from django.apps import apps


def operator_snapshot(client: redis.Redis) -> dict[str, object]:
    """Return all rows (by model, in primary-key order) and all keys with values."""
    rows: dict[str, object] = {}
    for model in apps.get_models():
        if not model._meta.managed or model._meta.proxy:
            continue  # no table of its own (django-rq's dashboard, proxies)
        rows[model._meta.label] = list(
            model._default_manager.order_by("pk").values_list()
        )
    keys = {key: client.dump(key) for key in sorted(client.keys())}
    return {"rows": rows, "redis": keys}

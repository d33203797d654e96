"""The HTTP caches the live part puts in front of daphne: ``Cache-Control`` parsing,
freshness, and a private (client) or shared (edge) store.
"""

from __future__ import annotations

from dataclasses import dataclass


def directives_of(header: str | None) -> dict[str, str | None]:
    """Return the directives of a Cache-Control value, names lower-cased."""
    directives: dict[str, str | None] = {}
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        if name:
            directives[name.strip().lower()] = value.strip().strip('"') or None
    return directives


def header_seconds(value: str | None) -> float | None:
    try:
        return float(int(value or ""))
    except ValueError:
        return None


def freshness_s(directives: dict[str, str | None], *, shared: bool) -> float | None:
    """Return how long a cache may serve the response without asking, or None.

    None means the response may not be kept: ``no-store`` anywhere, ``private`` or a
    missing ``public`` in a shared cache (the lab's edge keeps only what the origin
    declared public), ``no-cache`` or no lifetime at all. A shared cache prefers
    ``s-maxage``; a private one reads only ``max-age``.
    """
    if "no-store" in directives or "no-cache" in directives:
        return None
    if shared and ("private" in directives or "public" not in directives):
        return None
    lifetime = header_seconds(directives.get("max-age"))
    if shared and "s-maxage" in directives:
        lifetime = header_seconds(directives["s-maxage"])
    return lifetime


@dataclass
class Stored:
    stored_at: float  # clock reading when the response left the origin
    fresh_until: float
    cache_control: str


class HttpCache:
    """A bounded cache of responses by path that obeys their Cache-Control.

    Eviction follows the model so the two runs can be compared request by request:
    the client forgets its oldest write (a read does not refresh the order), the edge
    moves an entry to the young end whenever it answers, as the model's edge is
    rewritten on every hit.
    """

    def __init__(self, capacity: int, *, shared: bool) -> None:
        self.capacity = capacity
        self.shared = shared
        self._box: dict[str, Stored] = {}

    def lookup(self, path: str, now: float) -> Stored | None:
        """Return the fresh entry of ``path``; an expired one is dropped."""
        entry = self._box.get(path)
        if entry is None:
            return None
        if entry.fresh_until <= now:
            del self._box[path]
            return None
        if self.shared:
            self._box[path] = self._box.pop(path)
        return entry

    def offer(
        self, path: str, cache_control: str, *, stored_at: float, now: float
    ) -> bool:
        """Keep a response if its directives allow it; return whether it was kept.

        ``stored_at`` is when the response was produced upstream, so a copy taken from
        the edge is only fresh for what is left of its lifetime (the ``Age`` rule).
        """
        lifetime = freshness_s(directives_of(cache_control), shared=self.shared)
        if lifetime is None or stored_at + lifetime <= now:
            return False
        self._box.pop(path, None)
        self._box[path] = Stored(stored_at, stored_at + lifetime, cache_control)
        if len(self._box) > self.capacity:
            del self._box[next(iter(self._box))]
        return True

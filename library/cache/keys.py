"""Cache keys: one canonical, unforgeable string per distinct answer.

A key reads left to right from the widest scope to the narrowest::

    <namespace>:s<schema>:g<generation>:t<tenant>:<operation>[:<criteria>]

- ``namespace`` — which application or area of the store the entry belongs to;
- ``schema`` — the version of the *value format*; raising it strands every entry
  written in the old format at once, without a scan of the store;
- ``generation`` — a counter for bulk invalidation: bumping it makes every key under
  the same namespace and tenant unreachable (old entries age out by their lifetime);
- ``tenant`` — the authorisation scope (a branch); an entry may only be served to the
  tenant that is written into its key;
- ``operation`` and the canonical ``criteria`` — what was asked.

Criteria are made canonical so that equal questions share one entry and different
questions never do: empty values (``None`` and ``""``) are left out, the names are
sorted, each name and value is percent-escaped the way JavaScript's
``encodeURIComponent`` does it, and the pairs are joined as ``name=value`` with ``&``.
When that text is longer than ``CRITERIA_LIMIT`` characters it is replaced by ``c_``
and the first 16 hex digits of its SHA-256, which keeps keys short while the readable
part (namespace, tenant, operation) still tells an operator whose entry it is.

Pure functions, no I/O and no settings: the real views and the course's labs call the
same code (``course/labs/cache_key_design/``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

__all__ = [
    "CRITERIA_LIMIT",
    "DIGEST_PREFIX",
    "CacheKeyError",
    "CriterionValue",
    "KeySpec",
    "cache_key",
    "canonical_criteria",
    "escape_part",
]

# Criteria text up to this many characters stays readable in the key; longer text is
# summarised. 48 keeps a typical key under a hundred characters.
CRITERIA_LIMIT = 48
DIGEST_PREFIX = "c_"
DIGEST_HEX_CHARS = 16

# encodeURIComponent leaves these unescaped besides letters and digits. ``quote``
# always keeps letters, digits and ``_.-~``; the rest of the set is added here.
_EXTRA_SAFE = "!*'()"

CriterionValue = str | int | None


class CacheKeyError(ValueError):
    """A key part that cannot be turned into a key; the message is one line."""


def escape_part(text: str) -> str:
    """Return ``text`` percent-escaped like JavaScript's ``encodeURIComponent``.

    Everything except ``A-Z a-z 0-9 - _ . ! ~ * ' ( )`` becomes ``%XX`` per UTF-8
    byte (upper-case hex). In particular ``:``, ``&``, ``=`` and ``%`` are escaped,
    which is what keeps a value from ever reading as a separator.
    """
    try:
        return quote(text, safe=_EXTRA_SAFE, encoding="utf-8", errors="strict")
    except UnicodeEncodeError:
        # A lone surrogate has no UTF-8 form; encodeURIComponent throws here too.
        raise CacheKeyError("key text contains an unpaired surrogate") from None


def _value_text(name: str, value: str | int) -> str:
    # bool is an int to Python but would print as "True" where the course's
    # JavaScript prints "true"; refusing it avoids a key nobody expects.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise CacheKeyError(
            f"criterion {name!r}: value must be text or a whole number, "
            f"got {type(value).__name__}"
        )
    return str(value)


def _utf16_order(name: str) -> bytes:
    # JavaScript compares strings by UTF-16 code units, Python by code points; the
    # two disagree only above U+FFFF. Big-endian UTF-16 bytes sort like code units.
    return name.encode("utf-16-be", errors="surrogatepass")


def canonical_criteria(criteria: Mapping[str, CriterionValue]) -> str:
    """Return the criteria as ``name=value`` pairs: non-empty, sorted, escaped."""
    pairs: list[tuple[str, str]] = []
    for name, value in criteria.items():
        if not isinstance(name, str) or not name:
            raise CacheKeyError(f"criterion name must be non-empty text, got {name!r}")
        if value is None or value == "":
            continue  # an absent filter and an empty one ask the same question
        pairs.append((name, _value_text(name, value)))
    pairs.sort(key=lambda pair: _utf16_order(pair[0]))
    return "&".join(
        f"{escape_part(name)}={escape_part(value)}" for name, value in pairs
    )


def _summarise(text: str) -> str:
    if len(text) <= CRITERIA_LIMIT:
        return text
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    return DIGEST_PREFIX + digest[:DIGEST_HEX_CHARS]


def _word(label: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise CacheKeyError(f"{label} must be non-empty text, got {value!r}")
    return escape_part(value)


def _counter(label: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CacheKeyError(
            f"{label} must be a whole number >= {minimum}, got {value!r}"
        )
    return value


def cache_key(
    *,
    namespace: str,
    operation: str,
    tenant: str,
    generation: int = 1,
    schema_version: int = 1,
    criteria: Mapping[str, CriterionValue] | None = None,
) -> str:
    """Return the cache key for one question; raise CacheKeyError on a bad part.

    Why no part can forge another key: every free-text part (namespace, tenant,
    operation, criteria names and values) is escaped, so none of them can contain
    ``:``, ``&`` or ``=``; the counters are checked to be integers. A key therefore
    always splits into exactly five ``:``-separated fields, or six with criteria,
    and each field decodes back to one input. A tenant such as ``"2:search"`` or
    ``"1:g9:tbranch-3"`` stays inside the tenant field as ``2%3Asearch`` and cannot
    reach into the next field — the same reason the lesson's ``search:Sand:Borges``
    collision cannot happen here. Criteria text always contains ``=`` while a digest
    (``c_`` + hex) never does, so a summary cannot equal readable criteria either;
    two long criteria sets share a key only if 64 bits of SHA-256 collide.
    """
    head = ":".join(
        (
            _word("namespace", namespace),
            f"s{_counter('schema version', schema_version, 1)}",
            f"g{_counter('generation', generation, 0)}",
            f"t{_word('tenant', tenant)}",
            _word("operation", operation),
        )
    )
    tail = _summarise(canonical_criteria(criteria or {}))
    return f"{head}:{tail}" if tail else head


@dataclass(frozen=True)
class KeySpec:
    """The fixed parts of a family of keys (one view, one namespace).

    A view builds its spec once and asks it for the key of each request, so the
    namespace, operation and schema version are spelled in exactly one place::

        SEARCH = KeySpec(namespace="library", operation="search")
        SEARCH.key(tenant="branch-2", generation=4, criteria={"title": "Sand"})
    """

    namespace: str
    operation: str
    schema_version: int = 1

    def __post_init__(self) -> None:
        # Fail when the spec is declared (import time), not on the first request.
        cache_key(
            namespace=self.namespace,
            operation=self.operation,
            tenant="-",
            schema_version=self.schema_version,
        )

    def key(
        self,
        *,
        tenant: str,
        generation: int = 1,
        criteria: Mapping[str, CriterionValue] | None = None,
    ) -> str:
        """Return the key for one request under this spec."""
        return cache_key(
            namespace=self.namespace,
            operation=self.operation,
            tenant=tenant,
            generation=generation,
            schema_version=self.schema_version,
            criteria=criteria,
        )

"""What an error says once the values of one message are taken out (pure).

Dead letters are grouped by error so that one fix and one redrive clear a cluster.
Grouped by the raw text, three letters that failed in the same way made three
clusters, because each text named its own member, book or row: "member 7 not
found", "member 12 not found". ``error_signature`` keeps the words and replaces the
values, in this order, so an earlier rule's text is not taken apart by a later one:

1. quoted values, '…' or "…" (names, titles, keys): ``'…'``;
2. UUIDs: ``<uuid>``;
3. hex ids: ``0x``-prefixed, or runs of 8 or more hex digits that hold a digit
   (commit and object ids; a word like "accessed" has none): ``<hex>``;
4. numbers, integer or decimal, standing alone ("#12", "12.5 s", not "utf8"):
   ``<n>``.

Runs of white space become one space, and the result is cut to ``SIGNATURE_MAX``
characters: a cluster is named by the start of its error.
"""

from __future__ import annotations

import re
from typing import Final

SIGNATURE_MAX: Final = 500

_HEX: Final = "[0-9a-fA-F]"
_RULES: Final = (
    # A quote opens and closes outside a word: the apostrophe of "can't" is neither.
    (re.compile(r"(?<!\w)(?:'[^'\n]*'|\"[^\"\n]*\")(?!\w)"), "'…'"),
    (re.compile(rf"\b{_HEX}{{8}}(?:-{_HEX}{{4}}){{3}}-{_HEX}{{12}}\b"), "<uuid>"),
    (re.compile(rf"\b0[xX]{_HEX}+\b"), "<hex>"),
    # Eight or more hex digits with at least one digit and one letter among them
    # (all digits is a number, all letters may be a word).
    (re.compile(rf"\b(?=\w*\d)(?=\w*[a-fA-F]){_HEX}{{8,}}\b"), "<hex>"),
    # Not inside a word or after a dot: "utf8", "v2" and "py3.11" stay.
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)*(?!\w)"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def error_signature(error: str) -> str:
    """Return ``error`` with its per-message values replaced (see the module)."""
    text = error
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text.strip()[:SIGNATURE_MAX]

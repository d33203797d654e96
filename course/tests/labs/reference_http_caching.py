"""An independent re-implementation of the http-caching lab's validators.

Nothing here imports ``course/labs``: HTTP validators are checked with the standard
library's date parser.
"""

from __future__ import annotations

import hashlib
import json
from email.utils import parsedate_to_datetime
from typing import Any


def tag(payload: dict[str, Any]) -> tuple[str, int]:
    text = json.dumps(payload, separators=(",", ":")).encode()
    return '"' + hashlib.sha256(text).hexdigest()[:16] + '"', len(text)


def conditional(
    headers: dict[str, str], current_tag: str, modified_epoch: int | None
) -> bool:
    lowered = {k.lower(): v for k, v in headers.items()}
    if "if-none-match" in lowered:
        listed = [t.strip() for t in lowered["if-none-match"].split(",")]
        if "*" in listed:
            return True
        return any(
            t.removeprefix("W/") == current_tag.removeprefix("W/") for t in listed
        )
    if "if-modified-since" in lowered and modified_epoch is not None:
        try:
            since = parsedate_to_datetime(lowered["if-modified-since"])
        except (TypeError, ValueError):
            return False
        return modified_epoch <= int(since.timestamp())
    return False


def http_validators() -> list[list[Any]]:
    book = {"bookId": 7, "title": "Sand: Borges Selection", "author": "Anthology"}
    before = {**book, "on_shelf": 3}
    after = {**book, "on_shelf": 2}
    old_tag, size = tag(before)
    new_tag, new_size = tag(after)
    first_date = "Tue, 01 Jul 2025 09:00:00 GMT"
    first_epoch = int(parsedate_to_datetime(first_date).timestamp())

    def status(headers: dict[str, str], current: str, epoch: int) -> int:
        return 304 if conditional(headers, current, epoch) else 200

    rows = []
    for headers in ({}, {"If-None-Match": old_tag}, {"If-Modified-Since": first_date}):
        code = status(headers, old_tag, first_epoch)
        rows.append([code, size if code == 200 else 0])
    second_epoch = int(
        parsedate_to_datetime("Wed, 02 Jul 2025 14:30:00 GMT").timestamp()
    )
    code = status({"If-None-Match": old_tag}, new_tag, second_epoch)
    rows.append([code, new_size if code == 200 else 0])
    return rows

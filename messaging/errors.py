"""Errors the messaging spine treats specially."""

from __future__ import annotations

from typing import Any


class PermanentMessageError(ValueError):
    """The message itself cannot be applied (a malformed body): retrying cannot help.

    A stream consumer steps past such a message (logged, noted on the consumer)
    instead of stopping on it forever; a delivery still gets its attempts, then
    becomes a dead letter an operator can read.
    """


class DeadLetterError(ValueError):
    """A dead-letter action refused (no reason given for a discard, say).

    Its text is safe to show to the operator.
    """


class MessageBodyError(PermanentMessageError):
    """The message body lacks what the handler needs; retrying will not help."""


def body_int(body: Any, name: str) -> int:
    """Return the body's integer field ``name``; raise MessageBodyError without one."""
    if not isinstance(body, dict) or not isinstance(body.get(name), int):
        raise MessageBodyError(f"message body has no integer {name!r}")
    value: int = body[name]
    return value

"""A poison message for the reliability tests: its handler kills the worker process.

Installed only inside a test's worker process (see test_reliability), never in the app.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from messaging import registry
from messaging.models import OutboxMessage

_original = registry.HANDLERS["notification"]


def _poisoned(message: OutboxMessage) -> None:
    poison_book = int(Path(os.environ["LIBRARY_POISON_BOOK_FILE"]).read_text())
    if message.body.get("book_id") == poison_book:
        os.kill(
            os.getpid(), signal.SIGKILL
        )  # no exception, no cleanup: the process is gone
    _original(message)


def install() -> None:
    registry.HANDLERS["notification"] = _poisoned
    # Its group handler stands for the original only: the poisoned one runs alone.

"""Writes of the library: loans and stock (``loans``), overdue notices (``notices``),
the inventory refresh (``inventory``).

``loan_issue``, ``loan_return`` and ``stock_correct`` are exposed here, the names every
caller uses, and the desk forms' idempotent ``loan_issue_once`` and
``loan_return_once``.
"""

from library.services.loans import (
    Once,
    loan_issue,
    loan_issue_once,
    loan_return,
    loan_return_once,
    stock_correct,
    version_announce_on_commit,
)

__all__ = [
    "Once",
    "loan_issue",
    "loan_issue_once",
    "loan_return",
    "loan_return_once",
    "stock_correct",
    "version_announce_on_commit",
]

"""Writes of the library: loans and stock (``loans``), overdue notices (``notices``),
the inventory refresh (``inventory``).

``loan_issue``, ``loan_return`` and ``stock_correct`` are exposed here, the names every
caller uses.
"""

from library.services.loans import loan_issue, loan_return, stock_correct

__all__ = ["loan_issue", "loan_return", "stock_correct"]

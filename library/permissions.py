"""The named rights of the site, in one place (the guard is ``jobs.permissions``).

Being staff only opens the admin; every privileged action needs its own permission
(a superuser has them all). The custom ones are declared in ``Meta.permissions`` of
the model they act on (``library.Loan``, ``library.Book``, ``jobs.JobStatus``,
``jobs.ScheduledTaskState``), so the admin can grant them to a user or a group;
django-rq brings its own dashboard permission. Running a lab's live part is not a
permission: every active account may, unless an operator withdrew it from that
account (``course.models.LabAllowance``).
"""

from __future__ import annotations

from typing import Final

from django.contrib.auth.models import Permission

# The generic guard and the jobs app's rights live in jobs (infrastructure); they
# are named here too, so every right of the site is listed in one place.
from jobs.permissions import (
    PAUSE_SCHEDULED_TASK,
    RQ_DASHBOARD,
    RUN_REPORT,
    RUN_SCHEDULED_TASK,
    permission_required,
    user_may,
)

ISSUE_LOAN: Final = "library.issue_loan"
RETURN_LOAN: Final = "library.return_loan"
CORRECT_STOCK: Final = "library.correct_stock"
# The admin's Operations history and /metrics (declared on messaging.OutboxMessage).
VIEW_OPERATIONS: Final = "messaging.view_operations"
NAMED: Final = (
    ISSUE_LOAN,
    RETURN_LOAN,
    CORRECT_STOCK,
    RUN_REPORT,
    RUN_SCHEDULED_TASK,
    PAUSE_SCHEDULED_TASK,
    RQ_DASHBOARD,
    VIEW_OPERATIONS,
)

__all__ = [
    "CORRECT_STOCK",
    "ISSUE_LOAN",
    "NAMED",
    "PAUSE_SCHEDULED_TASK",
    "RETURN_LOAN",
    "RQ_DASHBOARD",
    "RUN_REPORT",
    "RUN_SCHEDULED_TASK",
    "VIEW_OPERATIONS",
    "permission_get",
    "permission_required",
    "user_may",
]


def permission_get(name: str) -> Permission:
    """Return the Permission row of ``name`` ("app_label.codename"), to grant it."""
    app_label, codename = name.split(".", 1)
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)

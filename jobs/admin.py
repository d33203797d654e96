"""JobStatus in the admin: what ran, for whom, how far; cancel and resume jobs.

A kind is resumable when its app registered it in ``jobs.resumable`` (the monthly
loan report, from LibraryConfig.ready()); jobs knows no kind by name.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

# For its side effect: it re-registers django-rq's admin with guarded routes.
import jobs.admin_rq
import jobs.admin_scheduler  # noqa: F401  (registers the scheduled tasks' admin)
from jobs.models import JobStatus
from jobs.permissions import RUN_REPORT, user_may
from jobs.resumable import JobRefused, jobstatus_resume
from jobs.services import REASON_OPERATOR, CancelOutcome, jobstatus_cancel_request


@admin.register(JobStatus)
class JobStatusAdmin(admin.ModelAdmin[JobStatus]):
    list_display = (
        "kind",
        "name",
        "state",
        "progress_bar",
        "started_by",
        "cancel_reason",
        "created_at",
        "finished_at",
    )
    list_filter = ("kind", "state")
    search_fields = ("name", "id")
    date_hierarchy = "created_at"
    list_select_related = ("created_by",)
    actions = ["cancel_selected", "resume_selected"]
    # Rows are written only by services (workers); editing them here would race
    # with a running job and break the version counter pollers rely on.
    readonly_fields = [field.name for field in JobStatus._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False

    @admin.display(description="progress", ordering="progress")
    def progress_bar(self, obj: JobStatus) -> str:
        percent = max(0.0, min(100.0, obj.progress))
        return format_html(
            '<span style="white-space: nowrap"><progress value="{}" max="100"'
            ' style="width: 7em; vertical-align: middle" aria-label="{}% done">'
            "</progress> {}%</span>",
            f"{percent:.0f}",
            f"{percent:.0f}",
            f"{percent:.0f}",
        )

    @admin.display(description="started by", ordering="created_by__username")
    def started_by(self, obj: JobStatus) -> str:
        return obj.created_by.get_username() if obj.created_by else "scheduler"

    def has_run_report_permission(self, request: HttpRequest) -> bool:
        # Cancel and resume are the report page's buttons: the same right, not the
        # view permission that opens this list.
        return user_may(request.user, RUN_REPORT)

    @admin.action(
        description="Cancel selected jobs (they stop at their next chunk)",
        permissions=["run_report"],
    )
    def cancel_selected(
        self, request: HttpRequest, queryset: QuerySet[JobStatus]
    ) -> None:
        who = request.user.get_username()
        outcomes: dict[str, int] = {}
        for job_id in queryset.values_list("pk", flat=True):
            outcome = jobstatus_cancel_request(
                job_id=job_id, reason=f"{REASON_OPERATOR} ({who})"
            )
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        stopped = outcomes.get(CancelOutcome.CANCELLED, 0)
        asked = outcomes.get(CancelOutcome.REQUESTED, 0)
        left = len(queryset) - stopped - asked
        self.message_user(
            request,
            f"{stopped} cancelled before starting, {asked} asked to stop at their "
            f"next chunk, {left} already finished or already asked.",
            messages.SUCCESS if stopped or asked else messages.WARNING,
        )

    @admin.action(
        description="Resume selected reports from their checkpoint",
        permissions=["run_report"],
    )
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[JobStatus]
    ) -> None:
        resumed, refused = 0, 0
        for job_id in queryset.values_list("pk", flat=True):
            try:
                jobstatus_resume(job_id=job_id)
            except JobRefused:
                refused += 1
            else:
                resumed += 1
        self.message_user(
            request,
            f"{resumed} report(s) queued again; {refused} not resumable "
            "(only cancelled or abandoned reports are).",
            messages.SUCCESS if resumed else messages.WARNING,
        )

"""JobStatus in the admin: a read-only record of what ran, for whom, and how."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

import jobs.admin_schedule  # noqa: F401  (registers the scheduled tasks' admin)
from jobs.models import JobStatus


@admin.register(JobStatus)
class JobStatusAdmin(admin.ModelAdmin[JobStatus]):
    list_display = (
        "kind",
        "name",
        "state",
        "progress",
        "created_by",
        "created_at",
        "finished_at",
    )
    list_filter = ("kind", "state")
    search_fields = ("name", "id")
    date_hierarchy = "created_at"
    list_select_related = ("created_by",)
    # Rows are written only by services (workers); editing them here would race
    # with a running job and break the version counter pollers rely on.
    readonly_fields = [field.name for field in JobStatus._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False

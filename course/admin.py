"""The course's records in the admin: who ran which lab, read-only."""

from __future__ import annotations

from django.contrib import admin

from course.models import LabRun
from jobs.admin_mixins import ReadOnlyAdminMixin


@admin.register(LabRun)
class LabRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[LabRun]):
    list_display = ("slug", "live", "state", "visitor", "created_at")
    list_filter = ("live", "slug", "job__state")
    search_fields = ("slug", "visitor", "job__id")
    date_hierarchy = "created_at"
    list_select_related = ("job",)

    @admin.display(description="state", ordering="job__state")
    def state(self, run: LabRun) -> str:
        return run.job.state

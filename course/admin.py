"""The course's records in the admin: who ran which lab (read-only), what each
learner is allowed, how far learners got (read-only: lessons and challenges), the
lab workers at work, and the audit of deleted accounts."""

from __future__ import annotations

from typing import Any

from allauth.account.admin import EmailAddressAdmin
from allauth.account.models import EmailAddress
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from course.models import (
    AccountDeletion,
    ChallengeProgress,
    LabAllowance,
    LabRun,
    LabWorkerState,
    LessonProgress,
)
from jobs.admin_mixins import ReadOnlyAdminMixin


@admin.register(LabRun)
class LabRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[LabRun]):
    list_display = ("slug", "live", "state", "shared", "cost", "visitor", "created_at")
    list_filter = ("live", "slug", "job__state")
    search_fields = ("slug", "visitor", "job__id")
    date_hierarchy = "created_at"
    list_select_related = ("job",)

    @admin.display(description="state", ordering="job__state")
    def state(self, run: LabRun) -> str:
        return run.job.state

    @admin.display(description="shared", boolean=True)
    def shared(self, run: LabRun) -> bool:
        return run.leader_id is not None


@admin.register(LabAllowance)
class LabAllowanceAdmin(admin.ModelAdmin[LabAllowance]):
    """Withdraw one learner's live right, or give them quotas of their own.

    Changing a row needs ``course.change_laballowance``; being staff is not enough.
    """

    list_display = (
        "user",
        "live_allowed",
        "runs_in_flight",
        "live_runs_per_hour",
        "cost_per_run",
        "cost_per_hour",
        "updated_at",
        "updated_by",
    )
    list_filter = ("live_allowed",)
    search_fields = ("user__username", "user__email", "reason")
    autocomplete_fields = ("user",)
    readonly_fields = ("updated_at", "updated_by")

    def save_model(
        self, request: HttpRequest, obj: LabAllowance, form: Any, change: bool
    ) -> None:
        obj.updated_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)


@admin.register(LessonProgress)
class LessonProgressAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[LessonProgress]):
    """Where learners are in the course: which lessons are read, run, answered."""

    list_display = ("user", "slug", "read_at", "lab_runs", "updated_at")
    list_filter = ("slug",)
    search_fields = ("user__username", "slug")
    date_hierarchy = "updated_at"
    list_select_related = ("user",)


@admin.register(ChallengeProgress)
class ChallengeProgressAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[ChallengeProgress]):
    """Which challenges learners take on, how many tries and hints they needed: an
    operator sees where a lesson's challenge is too hard, or its hints too weak."""

    list_display = (
        "user",
        "slug",
        "challenge",
        "attempts",
        "hints",
        "solved_at",
        "live_confirmed_at",
        "updated_at",
    )
    list_filter = (
        "slug",
        ("solved_at", admin.EmptyFieldListFilter),
        ("live_confirmed_at", admin.EmptyFieldListFilter),
    )
    search_fields = ("user__username", "slug", "challenge")
    date_hierarchy = "updated_at"
    list_select_related = ("user",)


@admin.register(LabWorkerState)
class LabWorkerStateAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[LabWorkerState]):
    list_display = (
        "name",
        "live_slots",
        "busy_live",
        "model_slots",
        "busy_model",
        "started_at",
        "seen_at",
    )


@admin.register(AccountDeletion)
class AccountDeletionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[AccountDeletion]):
    list_display = (
        "deleted_at",
        "lab_runs",
        "predictions",
        "progress_rows",
        "email_addresses",
        "member_unlinked",
    )
    date_hierarchy = "deleted_at"


# allauth registers its e-mail address admin with an action that declares no
# permission; here marking addresses verified needs the change permission.
admin.site.unregister(EmailAddress)


@admin.register(EmailAddress)
class LearnerEmailAddressAdmin(EmailAddressAdmin):
    actions = ["make_verified"]

    @admin.action(
        permissions=["change"], description="Mark selected addresses as verified"
    )
    def make_verified(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        super().make_verified(request, queryset)

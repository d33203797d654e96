"""Scheduled tasks in the admin: definition, runs, next slot and who holds the lease;
run now, pause and resume, each behind its named permission and a confirmation page.

The rows themselves stay read-only: they are written by the scheduler and its runs,
and the lease lives in Redis, where only its holder may touch it. The lease columns
are read live from Redis on every page view (an unreachable Redis shows as such, not
a 500). The three operator actions go through ``jobs.scheduler_actions``, which keeps
their audit trail; a task's page lists it as its history.

- Run now, and breaking a lease whose holder is shown dead (so that a run can go
  ahead), need ``jobs.run_scheduled_task``; pause and resume need
  ``jobs.pause_scheduled_task``. Staff without one see no button for it and get a
  403 on its page.
- Each action has its own page: GET shows what the action will do (and what is in
  its way), only the POST of its form acts (CSRF-checked by the admin).
- A refusal (the lease is held, already paused, an inline task) comes back on the
  same page as a 409 with the reason; a missing reason as a form error.
"""

from __future__ import annotations

import datetime
import zoneinfo
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst
from redis.exceptions import RedisError

from jobs.admin_mixins import ReadOnlyAdminMixin
from jobs.holders import holder_state
from jobs.locks import LeaseHolder, lease_holder
from jobs.models import ScheduledTaskState
from jobs.permissions import PAUSE_SCHEDULED_TASK, RUN_SCHEDULED_TASK, user_may
from jobs.recurrence import CatchUp, current_slot
from jobs.scheduler import TASKS_BY_NAME, PeriodicTask, lease_name, schedule_redis
from jobs.scheduler_actions import (
    REASON_MAX,
    ScheduleActionError,
    run_now_refusal,
    scheduled_task_lease_break,
    scheduled_task_pause,
    scheduled_task_resume,
    scheduled_task_run_now,
)

NOT_DEFINED = "(no longer defined)"
_STAMP = "%Y-%m-%d %H:%M:%S"
_UNREAD = object()
# The history on a task's page: the newest actions; older ones are counted.
HISTORY_SHOWN = 50


def _utc_text(value: datetime.datetime | None) -> str:
    return value.astimezone(datetime.UTC).strftime(f"{_STAMP} UTC") if value else "—"


def _local_text(value: datetime.datetime | None) -> str:
    if value is None:
        return "—"
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)  # display only; stored in UTC
    return value.astimezone(zone).strftime(f"{_STAMP} %Z")


def _paused_text(state: ScheduledTaskState) -> str:
    """Return "since … by …: reason" of a paused task (its state's own words)."""
    assert state.paused_at is not None
    who = state.paused_by.get_username() if state.paused_by else "?"
    return f"since {_utc_text(state.paused_at)} by {who}: {state.pause_reason}"


class ActionForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        required=False,
        label="Reason",
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Kept with your name in the task's history.",
    )

    def __init__(self, *args: Any, reason_required: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["reason"]
        field.required = reason_required
        field.error_messages["required"] = (
            "Say why the task is paused: the reason is kept in its history."
        )

    def clean_reason(self) -> str:
        text: str = self.cleaned_data["reason"]
        text = " ".join(text.split())
        if self.fields["reason"].required and not text:
            raise forms.ValidationError(
                self.fields["reason"].error_messages["required"], code="required"
            )
        return text


@dataclass(frozen=True)
class _Action:
    """One operator action as the admin offers it."""

    kind: str  # the URL segment
    verb: str
    permission: str
    reason_required: bool
    done: str  # the message after it, completed with the outcome


_RUN_NOW = _Action("run-now", "Run now", RUN_SCHEDULED_TASK, False, "Queued a run of")
_PAUSE = _Action("pause", "Pause", PAUSE_SCHEDULED_TASK, True, "Paused")
_RESUME = _Action("resume", "Resume", PAUSE_SCHEDULED_TASK, False, "Resumed")
_BREAK = _Action("break-lease", "Break lease", RUN_SCHEDULED_TASK, True, "Broke")
_ACTIONS = {action.kind: action for action in (_RUN_NOW, _PAUSE, _RESUME, _BREAK)}


class PausedFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("active", "active"), ("paused", "paused")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[ScheduledTaskState]
    ) -> QuerySet[ScheduledTaskState]:
        if self.value() == "paused":
            return queryset.filter(paused_at__isnull=False)
        if self.value() == "active":
            return queryset.filter(paused_at__isnull=True)
        return queryset


@admin.register(ScheduledTaskState)
class ScheduledTaskStateAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[ScheduledTaskState]):
    # Seven columns, each a few short lines, so the list fits a 1280 px screen beside
    # the admin's sidebar without sideways scrolling; the task's page has every
    # field on its own line.
    list_display = (
        "name",
        "status",
        "schedule",
        "last_run_outcome",
        "next_run",
        "lease",
        "totals",
    )
    list_filter = (PausedFilter,)
    list_select_related = ("paused_by",)
    fieldsets = (
        (None, {"fields": ("name", "status", "definition", "catch_up_policy")}),
        (
            "Schedule",
            {
                "fields": (
                    "next_run_utc",
                    "next_run_local",
                    "lock_holder",
                    "lease_expires",
                )
            },
        ),
        (
            "Last run",
            {
                "fields": (
                    "last_run",
                    "last_started",
                    "last_finished",
                    "last_outcome",
                )
            },
        ),
        (
            "Totals",
            {
                "fields": (
                    "runs_total",
                    "skipped_total",
                    "missed_total",
                    "paused_total",
                ),
                "description": "Skipped: the lease was held. Missed: dropped by the "
                "catch-up policy after an outage. Paused: passed while paused.",
            },
        ),
    )
    readonly_fields = [
        *(field.name for field in ScheduledTaskState._meta.fields),
        "status",
        "definition",
        "catch_up_policy",
        "last_run",
        "last_started",
        "last_finished",
        "next_run_utc",
        "next_run_local",
        "lock_holder",
        "lease_expires",
    ]

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return user_may(request.user, RUN_SCHEDULED_TASK)

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return user_may(request.user, PAUSE_SCHEDULED_TASK)

    # --- columns ----------------------------------------------------------------------

    @admin.display(description="status", ordering="paused_at")
    def status(self, obj: ScheduledTaskState) -> str:
        queued = ""
        if obj.run_now_queued_at is not None:
            queued = f" · run-now queued {_utc_text(obj.run_now_queued_at)}"
        if obj.paused_at is None:
            return format_html('<span class="sched-active">active</span>{}', queued)
        who = obj.paused_by.get_username() if obj.paused_by else "?"
        # Who and why in the cell, when in its tooltip: the list stays one line
        # per task on a desktop.
        return format_html(
            '<span class="sched-paused" title="since {}">paused</span> '
            '<span class="sched-why">by {}: {}</span>{}',
            _utc_text(obj.paused_at),
            who,
            obj.pause_reason,
            queued,
        )

    # --- the list's columns: the fields below, two or four to a cell -----------------

    @admin.display(description="schedule")
    def schedule(self, obj: ScheduledTaskState) -> str:
        task = TASKS_BY_NAME.get(obj.name)
        if task is None:
            return NOT_DEFINED
        where = "inline in the scheduler" if task.inline else f"queue {task.queue}"
        return format_html(
            '{} · {}<br><span class="sched-quiet sched-func">{} · {}</span>',
            task.recurrence.describe(),
            self.catch_up_policy(obj),
            task.func,
            where,
        )

    @admin.display(description="last run (slot, UTC)", ordering="last_run_at")
    def last_run_outcome(self, obj: ScheduledTaskState) -> str:
        if obj.last_run_at is None:
            return "—"
        return format_html(
            '{}<br><span class="sched-quiet">{}</span>',
            _utc_text(obj.last_run_at),
            obj.last_outcome or "—",
        )

    @admin.display(description="next run (UTC, local)", ordering="next_run_at")
    def next_run(self, obj: ScheduledTaskState) -> str:
        if obj.next_run_at is None:
            return "—"
        return format_html(
            '{}<br><span class="sched-quiet">{}</span>',
            _utc_text(obj.next_run_at),
            _local_text(obj.next_run_at),
        )

    @admin.display(description="lock holder")
    def lease(self, obj: ScheduledTaskState) -> str:
        holder = self._holder(obj)
        if isinstance(holder, str):
            return holder
        if holder is None:
            return "free"
        return format_html(
            '<span class="sched-holder">{}</span><br>'
            '<span class="sched-quiet">until {}</span>{}',
            holder.owner,
            _utc_text(holder.expires_at),
            _holder_note(holder),
        )

    @admin.display(description="totals")
    def totals(self, obj: ScheduledTaskState) -> str:
        return format_html(
            '<span title="slots run">{} run{}</span><br>'
            '<span class="sched-quiet" title="the lease was held">{} skipped</span>'
            '<br><span class="sched-quiet" title="dropped by the catch-up policy '
            'after an outage">{} missed</span><br>'
            '<span class="sched-quiet" title="passed while paused">{} paused</span>',
            obj.runs_total,
            "" if obj.runs_total == 1 else "s",
            obj.skipped_total,
            obj.missed_total,
            obj.paused_total,
        )

    # --- the task's page: one field a line -------------------------------------------

    @admin.display(description="definition")
    def definition(self, obj: ScheduledTaskState) -> str:
        task = TASKS_BY_NAME.get(obj.name)
        if task is None:
            return NOT_DEFINED
        where = "inline in the scheduler" if task.inline else f"queue {task.queue}"
        return f"{task.recurrence.describe()} · {task.func} · {where}"

    @admin.display(description="catch-up policy")
    def catch_up_policy(self, obj: ScheduledTaskState) -> str:
        task = TASKS_BY_NAME.get(obj.name)
        if task is None:
            return "—"
        if task.catch_up is CatchUp.CATCH_UP:
            return f"catch up (last {task.catch_up_limit})"
        return "no catch-up"

    @admin.display(description="last run (slot, UTC)", ordering="last_run_at")
    def last_run(self, obj: ScheduledTaskState) -> str:
        return _utc_text(obj.last_run_at)

    @admin.display(description="last started (UTC)")
    def last_started(self, obj: ScheduledTaskState) -> str:
        return _utc_text(obj.last_started_at)

    @admin.display(description="last finished (UTC)")
    def last_finished(self, obj: ScheduledTaskState) -> str:
        return _utc_text(obj.last_finished_at)

    @admin.display(description="next run (UTC)", ordering="next_run_at")
    def next_run_utc(self, obj: ScheduledTaskState) -> str:
        return _utc_text(obj.next_run_at)

    @admin.display(description="next run (local)")
    def next_run_local(self, obj: ScheduledTaskState) -> str:
        return _local_text(obj.next_run_at)

    def _holder(self, obj: ScheduledTaskState) -> LeaseHolder | str | None:
        """Return the lease holder, a reason it is unknown, or None when free."""
        # Read once per row and kept on it: both lease columns show the same reading.
        reading = getattr(obj, "_lease_reading", _UNREAD)
        if reading is _UNREAD:
            reading = _lease_reading(obj.name)
            setattr(obj, "_lease_reading", reading)  # noqa: B010
        assert reading is None or isinstance(reading, LeaseHolder | str)
        return reading

    @admin.display(description="lock holder")
    def lock_holder(self, obj: ScheduledTaskState) -> str:
        holder = self._holder(obj)
        if isinstance(holder, str):
            return holder
        if holder is None:
            return "free"
        return format_html("{}{}", holder.owner, _holder_note(holder))

    @admin.display(description="lease expires")
    def lease_expires(self, obj: ScheduledTaskState) -> str:
        holder = self._holder(obj)
        if isinstance(holder, str):
            return holder
        return _utc_text(holder.expires_at) if holder else "—"

    # --- the task's page: buttons and history -----------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The admin escapes the id in its URLs ("_" becomes "_5F", and every task
        # name has one): looked up raw, no task was found and the page had no
        # buttons. The stock view unquotes the same way.
        state = ScheduledTaskState.objects.filter(pk=unquote(object_id)).first()
        context: dict[str, Any] = {}
        if state is not None:
            actions = state.actions.select_related("user")
            task = TASKS_BY_NAME.get(state.name)
            context = {
                "history": list(actions[:HISTORY_SHOWN]),
                "history_unlisted": max(0, actions.count() - HISTORY_SHOWN),
                "buttons": self._buttons(request, state, task),
                "run_now_refusal": run_now_refusal(task) if task else None,
                "paused_text": _paused_text(state) if state.is_paused else "",
            }
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )

    def _buttons(
        self,
        request: HttpRequest,
        state: ScheduledTaskState,
        task: PeriodicTask | None,
    ) -> list[tuple[str, str]]:
        """Return (label, url) of the actions this user may take on the task."""
        if task is None:
            return []
        offered: list[_Action] = []
        if self.has_run_now_permission(request) and run_now_refusal(task) is None:
            offered.append(_RUN_NOW)
        if self.has_pause_permission(request):
            offered.append(_RESUME if state.is_paused else _PAUSE)
        if self.has_run_now_permission(request) and isinstance(
            self._holder(state), LeaseHolder
        ):
            offered.append(_BREAK)
        return [(f"{a.verb}…", _action_url(state.name, a)) for a in offered]

    # --- the action pages -------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        # Before the stock URLs: their "<path:object_id>/" would take these pages.
        return [
            path(
                f"<str:name>/{action.kind}/",
                self.admin_site.admin_view(self.action_view),
                {"kind": action.kind},
                name=_url_name(action),
            )
            for action in _ACTIONS.values()
        ] + super().get_urls()

    def action_view(self, request: HttpRequest, name: str, kind: str) -> HttpResponse:
        """Show what the action will do; do it when its form is POSTed."""
        action = _ACTIONS[kind]
        allowed = (
            self.has_run_now_permission(request)
            if action in (_RUN_NOW, _BREAK)
            else self.has_pause_permission(request)
        )
        if not (self.has_view_permission(request) and allowed):
            raise PermissionDenied("This action needs its own permission.")
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        task = TASKS_BY_NAME.get(name)
        if task is None:
            raise Http404(f"no periodic task named {name!r}")
        form = ActionForm(
            request.POST if request.method == "POST" else None,
            reason_required=action.reason_required,
        )
        refusal = ""
        if form.is_valid():
            try:
                done = self._perform(request, action, name, form.cleaned_data["reason"])
            except ScheduleActionError as error:
                refusal = str(error)
            else:
                self.message_user(request, done, messages.SUCCESS)
                return HttpResponseRedirect(_change_url(name))
        state = ScheduledTaskState.objects.select_related("paused_by").filter(name=name)
        response = self._confirmation(
            request, action, task, state.first(), form, refusal
        )
        if refusal:
            response.status_code = 409  # the task's state refused it, not the input
        return response

    def _perform(
        self, request: HttpRequest, action: _Action, name: str, reason: str
    ) -> str:
        """Do the action; return the message for the operator."""
        if action is _RUN_NOW:
            row = scheduled_task_run_now(name=name, user=request.user, reason=reason)
            assert row.slot is not None
            return (
                f"{action.done} {name} for the slot {_utc_text(row.slot)}; "
                "its outcome shows in the history below."
            )
        if action is _BREAK:
            outcome = scheduled_task_lease_break(
                name=name, user=request.user, reason=reason
            )
            return (
                f"{action.done} the lease of {name}: {outcome}. A slot it kept from "
                "running is not made up by itself: run it now if one was skipped."
            )
        if action is _PAUSE:
            scheduled_task_pause(name=name, user=request.user, reason=reason)
            return (
                f"{action.done} {name}: its slots pass without running until it "
                "is resumed."
            )
        row = scheduled_task_resume(name=name, user=request.user, reason=reason)
        return f"{action.done} {name}: {row.outcome.removeprefix('resumed: ')}."

    def _confirmation(
        self,
        request: HttpRequest,
        action: _Action,
        task: PeriodicTask,
        state: ScheduledTaskState | None,
        form: ActionForm,
        refusal: str,
    ) -> TemplateResponse:
        now = timezone.now()
        holder = _lease_reading(task.name)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{action.verb} {task.name}?",
            "action": action,
            "task": task,
            "state": state,
            "paused_text": _paused_text(state) if state and state.is_paused else "",
            "definition": (
                f"{task.recurrence.describe()} · {task.func} · "
                + ("inline in the scheduler" if task.inline else f"queue {task.queue}")
            ),
            "lease": _lease_text(holder),
            "lease_held": holder is not None,
            "holder_note": (
                holder_state(holder.owner).explanation
                if isinstance(holder, LeaseHolder)
                else ""
            ),
            "slot": _utc_text(current_slot(task.recurrence, now)),
            "next_run": _utc_text(state.next_run_at if state else None),
            "pass_slot": task.pass_slot,
            "inline_refusal": run_now_refusal(task) if action is _RUN_NOW else None,
            "refusal": refusal,
            "form": form,
            "change_url": (
                _change_url(task.name)
                if state
                else reverse("admin:jobs_scheduledtaskstate_changelist")
            ),
            "media": self.media + form.media,
        }
        return TemplateResponse(
            request, "admin/jobs/scheduledtaskstate/confirm.html", context
        )


def _lease_reading(name: str) -> LeaseHolder | str | None:
    try:
        return lease_holder(schedule_redis(), lease_name(name), now=timezone.now())
    except RedisError:
        return "Redis unreachable"


def _holder_note(holder: LeaseHolder) -> str:
    """Say when the holder is a process of this host that no longer runs."""
    state = holder_state(holder.owner)
    if not state.dead:
        return ""
    return format_html(
        '<br><span class="sched-dead-holder">{}</span>', capfirst(state.explanation)
    )


def _lease_text(holder: LeaseHolder | str | None) -> str:
    if isinstance(holder, str):
        return holder
    if holder is None:
        return "free"
    return f"held by {holder.owner} until {_utc_text(holder.expires_at)}"


def _change_url(name: str) -> str:
    """Return a task's page, its name escaped as the admin's own links escape it."""
    return reverse("admin:jobs_scheduledtaskstate_change", args=[quote(name)])


def _url_name(action: _Action) -> str:
    return f"jobs_scheduledtaskstate_{action.kind.replace('-', '_')}"


def _action_url(name: str, action: _Action) -> str:
    return reverse(f"admin:{_url_name(action)}", args=[name])

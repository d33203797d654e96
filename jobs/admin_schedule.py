"""Scheduled tasks in the admin: definition, runs, next slot and who holds the lease.

Read-only and staff-only: the rows are written by the scheduler and its runs, and the
lease lives in Redis, where only its holder may touch it. The lease columns are read
live from Redis on every page view (an unreachable Redis shows as such, not a 500).
"""

from __future__ import annotations

import datetime
import zoneinfo
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from redis.exceptions import RedisError

from jobs.locks import LeaseHolder, lease_holder
from jobs.models import ScheduledTaskState
from jobs.schedule import TASKS_BY_NAME, CatchUp
from jobs.scheduling import lease_name, schedule_redis

NOT_DEFINED = "(no longer defined)"
_STAMP = "%Y-%m-%d %H:%M:%S"
_UNREAD = object()


def _utc_text(value: datetime.datetime | None) -> str:
    return value.astimezone(datetime.UTC).strftime(f"{_STAMP} UTC") if value else "—"


def _local_text(value: datetime.datetime | None) -> str:
    if value is None:
        return "—"
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)  # display only; stored in UTC
    return value.astimezone(zone).strftime(f"{_STAMP} %Z")


@admin.register(ScheduledTaskState)
class ScheduledTaskStateAdmin(admin.ModelAdmin[ScheduledTaskState]):
    list_display = (
        "name",
        "definition",
        "catch_up_policy",
        "last_run",
        "last_outcome",
        "next_run_utc",
        "next_run_local",
        "lock_holder",
        "lease_expires",
        "runs_total",
        "skipped_total",
        "missed_total",
    )
    readonly_fields = [field.name for field in ScheduledTaskState._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False

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
            try:
                reading = lease_holder(
                    schedule_redis(), lease_name(obj.name), now=timezone.now()
                )
            except RedisError:
                reading = "Redis unreachable"
            setattr(obj, "_lease_reading", reading)  # noqa: B010
        assert reading is None or isinstance(reading, LeaseHolder | str)
        return reading

    @admin.display(description="lock holder")
    def lock_holder(self, obj: ScheduledTaskState) -> str:
        holder = self._holder(obj)
        if isinstance(holder, str):
            return holder
        return holder.owner if holder else "free"

    @admin.display(description="lease expires")
    def lease_expires(self, obj: ScheduledTaskState) -> str:
        holder = self._holder(obj)
        if isinstance(holder, str):
            return holder
        return _utc_text(holder.expires_at) if holder else "—"

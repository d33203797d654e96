"""What the scheduler remembers about each periodic task (jobs.schedule)."""

from __future__ import annotations

from django.db import models

__all__ = ["ScheduledTaskState"]


class ScheduledTaskState(models.Model):
    """One periodic task's runs so far and its next due time (UTC)."""

    name = models.CharField(max_length=60, primary_key=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)  # the slot it ran for
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    # "ran", "skipped (locked)", "failed: ...": what the last due run did.
    last_outcome = models.CharField(max_length=200, blank=True)
    runs_total = models.PositiveIntegerField(default=0)
    skipped_total = models.PositiveIntegerField(default=0)
    missed_total = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        verbose_name = "scheduled task"

    def __str__(self) -> str:
        return self.name

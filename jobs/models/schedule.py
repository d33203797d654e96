"""What the scheduler remembers about each periodic task (jobs.scheduler), and the
audit trail of what operators did to it."""

from __future__ import annotations

from django.conf import settings
from django.db import models

__all__ = ["ScheduledTaskAction", "ScheduledTaskState"]


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
    # Paused by an operator: every scheduler process reads it here, so the pause
    # holds however many schedulers and workers run. Slots that pass meanwhile are
    # counted in paused_total and never made up.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    pause_reason = models.CharField(max_length=200, blank=True)
    paused_total = models.PositiveIntegerField(default=0)
    # Set while an operator's run-now is queued or running, cleared when it ends:
    # the compare-and-set on it keeps a double click from queueing two runs.
    run_now_queued_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "scheduled task"
        permissions = [
            ("run_scheduled_task", "Can run a scheduled task now"),
            ("pause_scheduled_task", "Can pause and resume a scheduled task"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_paused(self) -> bool:
        return self.paused_at is not None


class ScheduledTaskAction(models.Model):
    """One operator action on a scheduled task: who, when, what, why, and its result.

    Written by ``jobs.scheduler_actions`` only; never edited afterwards except for a
    run-now's outcome, which its rq job fills in as the run goes.
    """

    class Kind(models.TextChoices):
        RUN_NOW = "run_now", "run now"
        PAUSE = "pause", "pause"
        RESUME = "resume", "resume"

    # PROTECT: a task with a history keeps its row (the admin deletes none anyway).
    task = models.ForeignKey(
        ScheduledTaskState, on_delete=models.PROTECT, related_name="actions"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    at = models.DateTimeField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # The name as it was: the audit must still say who after the account is gone.
    username = models.CharField(max_length=150)
    reason = models.CharField(max_length=200, blank=True)
    slot = models.DateTimeField(null=True, blank=True)  # run now: the slot it ran for
    # "paused", "resumed (…)", or a run-now's "queued", "running", "ran",
    # "skipped (locked by …)", "failed: …".
    outcome = models.CharField(max_length=200)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "scheduled task action"
        indexes = [
            # The history list on a task's admin page: its newest actions first.
            models.Index(fields=["task", "-at"], name="jobs_sta_task_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.task_id} by {self.username}"

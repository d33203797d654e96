"""Durable state of background jobs, readable by any process and any page."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class JobStatus(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (State.DONE, State.FAILED, State.CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=40)  # "lab", "report", ...
    name = models.CharField(max_length=100)  # the lab slug, the report name
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    progress = models.FloatField(default=0.0)  # 0..100
    message = models.CharField(max_length=200, blank=True)
    # Bumped on every change; pollers send the version they have and get 204 when equal.
    version = models.PositiveIntegerField(default=1)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Where a chunked job stands, written with its progress; a resumed job starts here.
    checkpoint = models.JSONField(null=True, blank=True)
    # Cooperative cancellation: set by whoever asks (page, admin, time limit,
    # shutdown, lost lease); the job reads it at its next chunk boundary.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=100, blank=True)
    # The worker running it and until when its claim holds (a lease, renewed per
    # chunk): a job whose lease ran out belongs to nobody and may be resumed.
    lease_owner = models.CharField(max_length=100, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "job status"
        verbose_name_plural = "job statuses"
        indexes = [
            models.Index(fields=["kind", "name", "-created_at"], name="job_kind_name"),
            # The unfinished jobs of a kind, a small set among many finished ones:
            # the lab queue's waiting and running runs (course.services.labqueue).
            models.Index(
                fields=["kind", "state", "created_at"],
                name="job_in_flight",
                condition=models.Q(state__in=["queued", "running"]),
            ),
        ]
        # Named in library.permissions: start, cancel and resume reports.
        permissions = [("run_report", "Can run, cancel and resume reports")]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name} {self.state} {self.progress:.0f}%"

    @property
    def is_finished(self) -> bool:
        return self.state in self.FINISHED

"""A learner's progress through the course (one row per learner and lesson), who
started which lab run, and the effects of the live labs' probe messages."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from jobs.models import JobStatus
from messaging.models import OutboxMessage


class LessonProgress(models.Model):
    """What a signed-in learner has done with one lesson.

    ``answered`` holds the numbers (0-based) of the questions whose answer the learner
    has opened; the lesson's text decides how many there are, so the share is worked
    out when shown, never stored.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="lesson_progress",
    )
    slug = models.SlugField(max_length=80)
    read_at = models.DateTimeField(null=True, blank=True)
    lab_runs = models.PositiveIntegerField(default=0)
    answered = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "slug"], name="lesson_progress_once"
            )
        ]
        verbose_name_plural = "lesson progress"
        # Named in library.permissions: a live run starts processes and writes rows.
        permissions = [("run_live_lab", "Can run the live part of a lab")]

    def __str__(self) -> str:
        return f"{self.user_id} · {self.slug}"


class ProbeEffect(models.Model):
    """The effect of a ``lab_probe`` message: one row per application, repeats kept.

    Not unique on purpose: the labs count repeated effects when a mode lets them in.
    """

    run = models.CharField(max_length=40, db_index=True)
    seq = models.PositiveIntegerField()
    message = models.ForeignKey(OutboxMessage, on_delete=models.CASCADE, null=True)
    mode = models.CharField(max_length=20, default="deduplication")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Kept from when messaging held the probes: existing databases keep their rows.
        db_table = "messaging_probeeffect"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"probe {self.run}#{self.seq}"


class LabRun(models.Model):
    """Whose lab run a JobStatus row is, so a learner finds their runs again.

    ``visitor`` is ``user:<id>`` for a signed-in learner and ``anon:<digest>`` (of the
    session key, never the key itself) for a visitor; the run's parameters, state,
    result and times stay on the JobStatus row.
    """

    job = models.OneToOneField(
        JobStatus, on_delete=models.CASCADE, primary_key=True, related_name="lab_run"
    )
    slug = models.SlugField(max_length=80)
    visitor = models.CharField(max_length=80)
    live = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["visitor", "slug", "-created_at"], name="course_labrun_mine"
            )
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.slug} run by {self.visitor}"

"""A learner's progress through the course (one row per learner and lesson), who
started which lab run, what an operator allows each learner, the audit of deleted
accounts, the lab workers at work, and the effects of the live labs' probe messages."""

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

    def __str__(self) -> str:
        return f"{self.user_id} · {self.slug}"


class ChallengeProgress(models.Model):
    """A signed-in learner's work on one challenge of a lesson (``[[challenges]]``).

    A row appears with the first answer or hint; ``solved_at`` is set by the first
    right answer and kept, with the answer that solved it. ``hints`` is how many
    of the challenge's hints the learner has opened, one at a time.
    ``live_confirmed_at`` is set the first time a live run of the solved answer
    met every ``live`` condition of the challenge, ``live_run`` naming that run
    (an id only: the run may be deleted, the confirmation stays).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="challenge_progress",
    )
    slug = models.SlugField(max_length=80)
    challenge = models.CharField(max_length=60)
    attempts = models.PositiveIntegerField(default=0)
    hints = models.PositiveSmallIntegerField(default=0)
    solved_at = models.DateTimeField(null=True, blank=True)
    answer = models.JSONField(default=dict, blank=True)
    live_confirmed_at = models.DateTimeField(null=True, blank=True)
    live_run = models.UUIDField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "slug", "challenge"], name="challenge_progress_once"
            )
        ]
        verbose_name_plural = "challenge progress"

    def __str__(self) -> str:
        return f"{self.user_id} · {self.slug} · {self.challenge}"


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
    """Whose lab run a JobStatus row is, what it costs, and whose result it shares.

    ``visitor`` is ``user:<id>`` for a signed-in learner and ``anon:<digest>`` (of a
    random token kept in the session, never the session key) for a visitor; the
    run's parameters, state, result and times stay on the JobStatus row. ``client``
    is a digest of the client address (anonymous quotas and fair turns), ``cost``
    the run's estimated work as a multiple of the lab's default run, and
    ``fingerprint`` a digest of the lab, its parameters and whether it is live, so
    identical runs find each other. A run that joined another (single flight) names
    it as ``leader``: the leader's progress and result are copied onto this run's
    own row, and no worker runs it.
    """

    job = models.OneToOneField(
        JobStatus, on_delete=models.CASCADE, primary_key=True, related_name="lab_run"
    )
    slug = models.SlugField(max_length=80)
    visitor = models.CharField(max_length=80)
    live = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    client = models.CharField(max_length=32, blank=True)
    cost = models.FloatField(default=1.0)
    fingerprint = models.CharField(max_length=64, blank=True)
    leader = models.ForeignKey(
        JobStatus,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="joined_runs",
    )

    class Meta:
        indexes = [
            models.Index(
                fields=["visitor", "slug", "-created_at"], name="course_labrun_mine"
            ),
            # Quotas: a visitor's or an address's runs of the last hour.
            models.Index(fields=["visitor", "created_at"], name="course_labrun_quota"),
            models.Index(fields=["client", "created_at"], name="course_labrun_client"),
            # Single flight: identical runs, newest first.
            models.Index(
                fields=["fingerprint", "-created_at"], name="course_labrun_same"
            ),
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.slug} run by {self.visitor}"


class LabAllowance(models.Model):
    """What an operator changed about one learner's use of the labs.

    Every active account may run live parts; a row here withdraws that right or
    sets the account's own quotas (an empty quota keeps the site's setting).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="lab_allowance",
    )
    live_allowed = models.BooleanField(
        default=True, help_text="Untick to withdraw the right to run live parts."
    )
    runs_in_flight = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Runs waiting or running at once."
    )
    live_runs_per_hour = models.PositiveSmallIntegerField(null=True, blank=True)
    cost_per_run = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The largest run, as a multiple of the default.",
    )
    cost_per_hour = models.PositiveIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        verbose_name = "learner allowance"

    def __str__(self) -> str:
        return f"lab allowance of user {self.user_id}"


class AccountDeletion(models.Model):
    """The audit of a learner deleting their account: when, and how much went.

    Holds no personal data on purpose: no user id, name or address, only counts.
    """

    deleted_at = models.DateTimeField(auto_now_add=True)
    lab_runs = models.PositiveIntegerField(default=0)
    predictions = models.PositiveIntegerField(default=0)
    progress_rows = models.PositiveIntegerField(default=0)
    email_addresses = models.PositiveIntegerField(default=0)
    member_unlinked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-deleted_at"]

    def __str__(self) -> str:
        return f"account deleted {self.deleted_at:%Y-%m-%d %H:%M}"


class LabWorkerState(models.Model):
    """A lab worker process at work: its slots, and when its heartbeat was last seen.

    Written by the worker's heartbeat; the lesson pages read the slots of the
    workers seen lately to estimate a waiting run's start, and the admin lists them.
    """

    name = models.CharField(max_length=120, primary_key=True)  # host:pid
    host = models.CharField(max_length=100)
    pid = models.PositiveIntegerField()
    live_slots = models.PositiveSmallIntegerField()
    model_slots = models.PositiveSmallIntegerField()
    busy_live = models.PositiveSmallIntegerField(default=0)
    busy_model = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        verbose_name = "lab worker"

    def __str__(self) -> str:
        return self.name


class LabFlight(models.Model):
    """One row per run fingerprint (lab, parameters, live): the lock that makes the
    lab service's single flight hold under concurrency.

    Two learners asking for the same run at the same moment would each find no
    identical run in flight and each queue one. ``lab_run_request`` first writes
    this row, inside the transaction that looks for a run to join and records the
    new one, so the second request waits for the first to commit and then joins
    its run (PostgreSQL locks the row; SQLite the whole database, for a moment).
    """

    fingerprint = models.CharField(max_length=64, primary_key=True)
    touched_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.fingerprint

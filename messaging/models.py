"""The outbox log, its deliveries (one per subscription), dedup guard, dead letters."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from messaging.registry import message_type_choices
from messaging.signatures import SIGNATURE_MAX, error_signature


class OutboxMessage(models.Model):
    """An append-only log entry; its id is the offset.

    Written by a library service in the same transaction as the change it describes.
    """

    id = models.BigAutoField(primary_key=True)
    type = models.CharField(max_length=40, choices=message_type_choices)
    key = models.CharField(max_length=100)  # e.g. the book id: what ordering is per
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    relayed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The relay's lookup of messages without deliveries yet (relay_pending).
            models.Index(
                fields=["id"],
                condition=models.Q(relayed_at__isnull=True),
                name="outbox_unrelayed",
            )
        ]
        # Named in library.permissions: the admin's Operations history and /metrics,
        # mostly this log's lag, deliveries and dead letters. Looking at them does
        # not come with staff status (which opens the admin, not the numbers).
        permissions = [
            ("view_operations", "Can view the operations history and /metrics")
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.type} key={self.key}"


class Delivery(models.Model):
    """One subscription's copy of one message, with its retry state."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        DEAD = "dead"

    message = models.ForeignKey(
        OutboxMessage, on_delete=models.CASCADE, related_name="deliveries"
    )
    subscription = models.CharField(max_length=40)
    status = models.CharField(
        max_length=8, choices=Status.choices, default=Status.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)  # counted when claimed
    # Failures the worker lived to record; attempts - 1 - failures of them died with it.
    failures = models.PositiveIntegerField(default=0)
    # Attempts taken in a group commit (messaging.services.process), counted at claim
    # time with ``attempts``. A group that fails turns its tries back into solo ones,
    # so on a pending delivery these are group attempts whose worker died: any
    # batch-mate may have killed it, so they never count against ``max_attempts``,
    # and count as deaths only once the delivery kills a worker alone (death_count).
    group_tries = models.PositiveIntegerField(default=0)
    available_at = models.DateTimeField()
    leased_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    first_failed_at = models.DateTimeField(null=True, blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    done_at = models.DateTimeField(null=True, blank=True)
    # Set for a partitioned (ordered) subscription: hash of the message key.
    partition = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["message", "subscription"],
                name="delivery_once_per_subscription",
            )
        ]
        indexes = [
            # The claim query (deliveries_claim): pending work that is due.
            models.Index(
                fields=["available_at", "id"],
                condition=models.Q(status="pending"),
                name="delivery_pending_due",
            ),
            models.Index(fields=["subscription", "status"], name="delivery_sub_status"),
            # The history sampler's count of deliveries done per minute and
            # subscription (messaging.selectors.throughput): a range of done_at,
            # answered from the index alone.
            models.Index(
                fields=["done_at", "subscription"],
                condition=models.Q(done_at__isnull=False),
                name="delivery_done_at",
            ),
            # /metrics counts dead deliveries per subscription at every scrape: from
            # this index alone, not a pass over the (mostly done) table.
            models.Index(
                fields=["subscription"],
                condition=models.Q(status="dead"),
                name="delivery_dead",
            ),
            # A partition's head: its oldest pending delivery.
            models.Index(
                fields=["subscription", "partition", "message"],
                condition=models.Q(status="pending", partition__isnull=False),
                name="delivery_partition_head",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.subscription} ← #{self.message_id} ({self.status}, {self.attempts})"
        )


class ProcessedMessage(models.Model):
    """The dedup guard: committed together with a subscription's effect."""

    subscription = models.CharField(max_length=40)
    message = models.ForeignKey(OutboxMessage, on_delete=models.CASCADE)
    processed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "message"],
                name="processed_once_per_subscription",
            )
        ]

    def __str__(self) -> str:
        return f"{self.subscription} processed #{self.message_id}"


class DeadLetter(models.Model):
    """A delivery that used up its attempts, kept with all a redrive needs."""

    delivery = models.OneToOneField(
        Delivery, on_delete=models.CASCADE, related_name="dead_letter"
    )
    subscription = models.CharField(max_length=40)
    message_type = models.CharField(max_length=40)
    body = models.JSONField()  # the body as it was, so a redrive needs nothing else
    attempts = models.PositiveIntegerField()
    last_error = models.TextField()
    # ``last_error`` with its per-message values taken out (messaging.signatures):
    # what the clusters view groups by, so letters that failed the same way for
    # different members or books make one cluster. Set on every save.
    error_signature = models.CharField(
        max_length=SIGNATURE_MAX, blank=True, default="", editable=False
    )
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    redriven_at = models.DateTimeField(null=True, blank=True)
    redriven_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    redrive_count = models.PositiveIntegerField(default=0)
    # Discarding archives a letter: it leaves the open list but keeps its record
    # (a deleted letter would leave its delivery dead with no trace of why).
    discarded_at = models.DateTimeField(null=True, blank=True)
    discarded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    discard_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-last_failed_at"]
        indexes = [
            models.Index(fields=["redriven_at"], name="deadletter_open"),
            # The history sampler's letters per minute (a range of last_failed_at),
            # and the admin list's default order.
            models.Index(
                fields=["last_failed_at", "subscription"],
                name="deadletter_last_failed",
            ),
        ]
        # Asked by the admin's actions: an operator who may look at letters does
        # not thereby send them back to a subscriber or archive them.
        permissions = [
            ("redrive_deadletter", "Can redrive dead letters"),
            ("discard_deadletter", "Can discard dead letters"),
        ]

    def __str__(self) -> str:
        return f"{self.subscription} ← {self.message_type} #{self.delivery.message_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.error_signature = error_signature(self.last_error)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "last_error" in update_fields:
            kwargs["update_fields"] = {*update_fields, "error_signature"}
        super().save(*args, **kwargs)

    @property
    def is_open(self) -> bool:
        return self.redriven_at is None and self.discarded_at is None


class SubscriptionState(models.Model):
    """Whether a subscription takes copies now, and from which offset on.

    A subscription sees only what is published after it starts: the relay writes its
    copies for messages with ``id > starts_after`` while it is active. A subscription
    the relay meets for the first time starts after the last message relayed before
    it, so deploying a new subscription does not flood it with the past.
    """

    name = models.CharField(max_length=40, primary_key=True)
    active = models.BooleanField(default=True)
    starts_after = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "subscription"

    def __str__(self) -> str:
        state = "active" if self.active else "paused"
        return f"{self.name} ({state}, after #{self.starts_after})"


class PartitionLease(models.Model):
    """Who processes one partition of an ordered subscription, and until when.

    One worker at a time per partition is what keeps a key's messages in order; the
    lease expires so a dead worker's partition is taken over.
    """

    subscription = models.CharField(max_length=40)
    partition = models.PositiveSmallIntegerField()
    owner = models.CharField(max_length=64, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)
    processed = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["subscription", "partition"]
        verbose_name = "partition"
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "partition"], name="one_lease_per_partition"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subscription}[{self.partition}]"


class StreamConsumer(models.Model):
    """A named reader of the outbox log: its offset, committed with its effects."""

    class State(models.TextChoices):
        OK = "ok"
        # Its next message was trimmed away: it stops instead of skipping silently.
        TRIMMED = "trimmed"
        FAILING = "failing"

    name = models.CharField(max_length=40, primary_key=True)
    offset = models.BigIntegerField(default=0)  # the last message id it applied
    state = models.CharField(max_length=8, choices=State.choices, default=State.OK)
    last_error = models.TextField(blank=True)
    applied_total = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)
    rewound_at = models.DateTimeField(null=True, blank=True)
    rewound_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    rewound_to = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} @ {self.offset}"


class LogRetention(models.Model):
    """The log's trimmed prefix: one row. Offsets below ``earliest_offset`` are gone."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    earliest_offset = models.BigIntegerField(default=1)
    trimmed_total = models.PositiveBigIntegerField(default=0)
    last_trim_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"log from #{self.earliest_offset}"

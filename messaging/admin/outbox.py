"""The outbox: an append-only log (its id is the offset), read-only."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join

from jobs.admin_mixins import ReadOnlyAdminMixin
from messaging.admin.common import (
    STATUS_MARK,
    json_block,
    timestamp_column,
)
from messaging.models import Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS
from messaging.templatetags.messaging_admin import short_duration


class DeliveryInline(ReadOnlyAdminMixin, admin.TabularInline[Delivery, OutboxMessage]):
    model = Delivery
    fields = readonly_fields = (
        "subscription",
        "status",
        "attempts",
        "available_at",
        "leased_until",
        "lease_owner",
        "last_error",
    )
    can_delete = False
    extra = 0
    show_change_link = True


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[OutboxMessage]):
    list_display = [
        "id",
        "type",
        "key",
        "created",
        "relayed",
        "lag",
        "delivery_summary",
    ]
    list_display_links = ["id"]
    list_filter = ["type", ("relayed_at", admin.EmptyFieldListFilter)]
    search_fields = ["=key", "=id"]
    date_hierarchy = "created_at"
    ordering = ["-id"]
    list_per_page = 50
    fields = readonly_fields = (
        "id",
        "type",
        "key",
        "created_at",
        "relayed_at",
        "lag",
        "pretty_body",
    )
    inlines = [DeliveryInline]

    created = timestamp_column("created_at", "created at")
    relayed = timestamp_column("relayed_at", "relayed at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[OutboxMessage]:
        # The summary column reads every row's deliveries: one query for the page.
        deliveries = Delivery.objects.only("id", "message_id", "subscription", "status")
        return (
            super()
            .get_queryset(request)
            .prefetch_related(Prefetch("deliveries", queryset=deliveries))
        )

    @admin.display(description="lag")
    def lag(self, message: OutboxMessage) -> str:
        """Return created → relayed, or created → now while not relayed yet."""
        end = message.relayed_at or timezone.now()
        return short_duration(end - message.created_at)

    @admin.display(description="deliveries")
    def delivery_summary(self, message: OutboxMessage) -> str:
        if message.relayed_at is None:
            return "not relayed yet"
        order = {name: n for n, name in enumerate(SUBSCRIPTIONS)}
        rows = sorted(
            message.deliveries.all(),
            key=lambda d: (order.get(d.subscription, len(order)), d.subscription),
        )
        # One unbreakable item per subscription: a line break never splits a name
        # from its mark.
        return format_html_join(
            " · ",
            '<span class="delivery-{}" title="{}">{} {}</span>',
            (
                (d.status, d.status, d.subscription, STATUS_MARK.get(d.status, "?"))
                for d in rows
            ),
        )

    @admin.display(description="body")
    def pretty_body(self, message: OutboxMessage) -> str:
        return json_block(message.body)

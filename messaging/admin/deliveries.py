"""Deliveries: read-only, since a worker may be changing their retry state."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from jobs.admin_mixins import ReadOnlyAdminMixin
from messaging.admin.common import (
    outbox_link,
    preview_text,
    timestamp_column,
)
from messaging.models import Delivery


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[Delivery]):
    list_display = [
        "id",
        "message_link",
        "subscription",
        "status",
        "attempts",
        "available",
        "leased",
        "lease_owner",
        "error_preview",
    ]
    list_display_links = ["id"]
    list_filter = ["status", "subscription", "message__type"]
    search_fields = ["=message__id", "=message__key", "lease_owner"]
    list_select_related = ["message"]
    ordering = ["-id"]
    list_per_page = 50

    available = timestamp_column("available_at", "available at")
    leased = timestamp_column("leased_until", "leased until")

    @admin.display(description="message", ordering="message_id")
    def message_link(self, delivery: Delivery) -> str:
        return format_html(
            "{} {}", outbox_link(delivery.message_id), delivery.message.type
        )

    @admin.display(description="last error")
    def error_preview(self, delivery: Delivery) -> str:
        return preview_text(delivery.last_error)

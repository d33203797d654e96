"""Partition leases: read-only, with each partition's pending load and hot key."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html

from jobs.admin_mixins import ReadOnlyAdminMixin
from messaging.admin.common import outbox_link
from messaging.models import PartitionLease
from messaging.selectors import partition_lease_rows, partitioned_loads


@admin.register(PartitionLease)
class PartitionLeaseAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[PartitionLease]):
    list_display = [
        "subscription",
        "partition",
        "load",
        "hot_key",
        "head",
        "processed",
        "owner",
        "lease",
    ]
    list_display_links = ["subscription"]
    list_filter = ["subscription"]
    fields = readonly_fields = (
        "subscription",
        "partition",
        "load",
        "hot_key",
        "head",
        "processed",
        "owner",
        "lease",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[PartitionLease]:
        return partition_lease_rows(super().get_queryset(request))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"title": "Partitions", "partition_loads": partitioned_loads()}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    @admin.display(description="pending", ordering="load")
    def load(self, lease: Any) -> int:
        return int(lease.load)

    @admin.display(description="hot key", ordering="hot_key_load")
    def hot_key(self, lease: Any) -> str:
        if lease.hot_key is None:
            return "—"
        return f"{lease.hot_key} ({lease.hot_key_load} pending)"

    @admin.display(description="head", ordering="head_offset")
    def head(self, lease: Any) -> str:
        """Link the message the partition waits on (its oldest pending)."""
        if lease.head_offset is None:
            return "—"
        return outbox_link(lease.head_offset)

    @admin.display(description="owner", ordering="owner")
    def owner(self, lease: PartitionLease) -> str:
        return lease.owner or "—"

    @admin.display(description="leased until", ordering="leased_until")
    def lease(self, lease: PartitionLease) -> str:
        """Return the expiry; an expired lease is free for the next worker."""
        if lease.leased_until is None:
            return "free"
        local = timezone.localtime(lease.leased_until).strftime("%b %d %H:%M:%S")
        if lease.leased_until < timezone.now():
            return format_html('<span class="lease-expired">{} (expired)</span>', local)
        return local

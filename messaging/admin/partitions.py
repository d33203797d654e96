"""Partition leases: read-only, with each partition's pending load and hot key.

One action: freeing partitions held by a worker that died (``partition_dead_leases
_release``), confirmed on a page that says whether each holder still runs. It asks
for ``messaging.redrive_deadletter``: like a redrive, it sends a head that was held
back to the workers (who isolate it if it keeps killing them).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst

from jobs.admin_mixins import ReadOnlyAdminMixin
from jobs.holders import holder_state
from messaging.admin.common import acting_user, outbox_link
from messaging.models import PartitionLease
from messaging.selectors import partition_lease_rows, partitioned_loads
from messaging.services.leases import (
    LeaseReleaseError,
    partition_dead_leases_release,
    partition_holder_dead,
)


@admin.register(PartitionLease)
class PartitionLeaseAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[PartitionLease]):
    list_display = [
        "subscription",
        "partition",
        "load",
        "hot_key",
        "head",
        "processed",
        "holder",
        "lease",
    ]
    list_display_links = ["subscription"]
    list_filter = ["subscription"]
    actions = ["release_dead"]
    fields = readonly_fields = (
        "subscription",
        "partition",
        "load",
        "hot_key",
        "head",
        "processed",
        "holder",
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
    def holder(self, lease: PartitionLease) -> str:
        if not lease.owner:
            return "—"
        if partition_holder_dead(lease):
            return format_html(
                '{}<br><span class="lease-dead-owner">{}</span>',
                lease.owner,
                capfirst(holder_state(lease.owner).explanation),
            )
        return lease.owner

    def has_release_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("messaging.redrive_deadletter")

    @admin.action(
        description="Free partitions held by a dead worker…", permissions=["release"]
    )
    def release_dead(
        self, request: HttpRequest, queryset: QuerySet[PartitionLease]
    ) -> TemplateResponse | None:
        """Show each selected partition's holder and whether it runs; free on "yes"."""
        leases = list(queryset.order_by("subscription", "partition"))
        if request.POST.get("post") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Free partitions held by a dead worker?",
                "rows": [
                    (x, _holder_text(x), partition_holder_dead(x)) for x in leases
                ],
                "freeable": sum(1 for x in leases if partition_holder_dead(x)),
                "selected_ids": [x.pk for x in leases],
            }
            return TemplateResponse(
                request, "admin/messaging/partitionlease/release.html", context
            )
        for lease in leases:
            try:
                done = partition_dead_leases_release(
                    lease_id=lease.pk, user=acting_user(request)
                )
            except LeaseReleaseError as error:
                self.message_user(request, str(error), messages.WARNING)
                continue
            self.message_user(
                request,
                f"Freed {done.subscription}[{done.partition}] from {done.owner} "
                f"({done.explanation}); its head goes back to the workers.",
                messages.SUCCESS,
            )
        return None

    @admin.display(description="leased until", ordering="leased_until")
    def lease(self, lease: PartitionLease) -> str:
        """Return the expiry; an expired lease is free for the next worker."""
        if lease.leased_until is None:
            return "free"
        local = timezone.localtime(lease.leased_until).strftime("%b %d %H:%M:%S")
        if lease.leased_until < timezone.now():
            return format_html('<span class="lease-expired">{} (expired)</span>', local)
        return local


def _holder_text(lease: PartitionLease) -> str:
    """Return who holds the partition and whether that process runs."""
    if not lease.owner or lease.leased_until is None:
        return "free"
    if lease.leased_until < timezone.now():
        return f"{lease.owner}: lease expired, free for the next worker"
    return f"{lease.owner}: {holder_state(lease.owner).explanation}"

"""The operator's admin for the messaging spine.

Everything here is a view on rows that only the spine's services write:

- The outbox is an append-only log (its id is the offset): no add, change or delete.
- Deliveries carry retry state a worker may be changing right now; editing them here
  would race with a claim, so they are read-only.
- Dead letters are read-only too; the one write is the "Redrive selected" action,
  which goes through ``deadletter_redrive`` (attempts reset, due now, who and when
  recorded). The clusters view groups open letters by error: letters that failed the
  same way usually share one cause, so the records themselves give the diagnosis.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

import django_stubs_ext
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.text import Truncator

from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.registry import SUBSCRIPTIONS
from messaging.selectors import deadletter_clusters
from messaging.services import deadletter_redrive
from messaging.templatetags.messaging_admin import short_duration

# Makes ``ModelAdmin[OutboxMessage]`` subscriptable at run time; idempotent.
django_stubs_ext.monkeypatch()

# Keyed by the plain values: the rows hold strings, not Status members.
STATUS_MARK: dict[str, str] = {
    Delivery.Status.PENDING.value: "⟳",
    Delivery.Status.DONE.value: "✓",
    Delivery.Status.DEAD.value: "✗",
}
ERROR_PREVIEW = 80


def _truncated(text: str) -> str:
    return Truncator(text).chars(ERROR_PREVIEW)


def _message_link(message_id: int) -> str:
    url = reverse("admin:messaging_outboxmessage_change", args=[message_id])
    return format_html('<a href="{}">#{}</a>', url, message_id)


def _timestamp(
    field: str, description: str, *, seconds: bool = True
) -> Callable[[Any, Any], str]:
    """Return a list column showing ``field`` as local ``Nov 29 14:38:05``.

    The stock format drops seconds and takes three times the width; seconds matter
    for leases and backoffs. The full timestamp is in the tooltip.
    """
    shape = "%b %d %H:%M:%S" if seconds else "%b %d %H:%M"

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Any) -> str:
        value: datetime.datetime | None = getattr(obj, field)
        if value is None:
            return "—"
        local = timezone.localtime(value)
        return format_html(
            '<span title="{}">{}</span>',
            local.isoformat(timespec="seconds"),
            local.strftime(shape),
        )

    return column


def _pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre style="margin: 0">{}</pre>', text)


class ReadOnlyAdminMixin:
    """Refuse add, change and delete; view permission is enough to read."""

    def has_add_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False


# --- Outbox ---------------------------------------------------------------------------


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

    created = _timestamp("created_at", "created at")
    relayed = _timestamp("relayed_at", "relayed at")

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
        return _pretty_json(message.body)


# --- Deliveries -----------------------------------------------------------------------


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

    available = _timestamp("available_at", "available at")
    leased = _timestamp("leased_until", "leased until")

    @admin.display(description="message", ordering="message_id")
    def message_link(self, delivery: Delivery) -> str:
        return format_html(
            "{} {}", _message_link(delivery.message_id), delivery.message.type
        )

    @admin.display(description="last error")
    def error_preview(self, delivery: Delivery) -> str:
        return _truncated(delivery.last_error)


# --- Dead letters ---------------------------------------------------------------------


class OpenFilter(admin.SimpleListFilter):
    """Open (waiting for an operator) or redriven; everything when not chosen."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("open", "Open"), ("redriven", "Redriven")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "open":
            return queryset.filter(redriven_at__isnull=True)
        if self.value() == "redriven":
            return queryset.filter(redriven_at__isnull=False)
        return queryset


class LastErrorFilter(admin.SimpleListFilter):
    """Exact ``?last_error=…``, as linked from the clusters view.

    Listing every distinct error in the sidebar would bury the other filters, so the
    filter shows only while it is in use (with "All" to leave it).
    """

    title = "last error"
    parameter_name = "last_error"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [] if value is None else [(value, _truncated(value))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(last_error=value)


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin[DeadLetter]):
    # Type and offset share a column, and "redriven" says when, by whom and how often:
    # twelve separate columns do not fit beside the filters on a laptop screen.
    list_display = [
        "subscription",
        "message_offset",
        "attempts",
        "error_preview",
        "first_failed",
        "last_failed",
        "age",
        "redriven",
    ]
    list_display_links = ["subscription"]
    list_filter = [OpenFilter, "subscription", "message_type", LastErrorFilter]
    search_fields = ["=delivery__message__id", "last_error"]
    list_select_related = ["delivery", "redriven_by"]
    actions = ["redrive"]
    list_per_page = 50
    fields = readonly_fields = (
        "subscription",
        "message_type",
        "message_offset",
        "delivery",
        "attempts",
        "last_error",
        "first_failed_at",
        "last_failed_at",
        "created_at",
        "redriven_at",
        "redriven_by",
        "redrive_count",
        "pretty_body",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Letters are written by the workers when a delivery uses up its attempts.
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: DeadLetter | None = None
    ) -> bool:
        # A deleted letter would leave its delivery dead with nothing to redrive it.
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: DeadLetter | None = None
    ) -> bool:
        # The change permission is what the redrive action asks for (obj is None);
        # a single letter is never edited, so its page is read-only.
        if obj is not None:
            return False
        return super().has_change_permission(request)

    # Minutes are enough here: letters wait for a person, not for a backoff.
    first_failed = _timestamp("first_failed_at", "first failed", seconds=False)
    last_failed = _timestamp("last_failed_at", "last failed", seconds=False)

    @admin.display(description="redriven", ordering="redriven_at")
    def redriven(self, letter: DeadLetter) -> str:
        """Return when and by whom, with the count once it is more than one.

        An open letter with a count was redriven before and died again.
        """
        count = letter.redrive_count
        if letter.redriven_at is None:
            return f"redriven before ({count})" if count else "—"
        when = timezone.localtime(letter.redriven_at).strftime("%b %d %H:%M")
        who = letter.redriven_by.get_username() if letter.redriven_by else "?"
        return f"{when} by {who}" + (f" ({count} times)" if count > 1 else "")

    @admin.display(description="message", ordering="delivery__message_id")
    def message_offset(self, letter: DeadLetter) -> str:
        return format_html(
            "{} {}", _message_link(letter.delivery.message_id), letter.message_type
        )

    @admin.display(description="last error")
    def error_preview(self, letter: DeadLetter) -> str:
        return _truncated(letter.last_error)

    @admin.display(description="age", ordering="-last_failed_at")
    def age(self, letter: DeadLetter) -> str:
        """Return how long an open letter has waited since it went dead."""
        if not letter.is_open:
            return "—"
        return short_duration(timezone.now() - letter.last_failed_at)

    @admin.display(description="body")
    def pretty_body(self, letter: DeadLetter) -> str:
        return _pretty_json(letter.body)

    @admin.action(description="Redrive selected dead letters", permissions=["change"])
    def redrive(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        user = request.user if isinstance(request.user, AbstractBaseUser) else None
        redriven = deadletter_redrive(ids=ids, user=user)
        if redriven:
            self.message_user(
                request, f"Redrove {redriven} dead letter(s).", messages.SUCCESS
            )
        skipped = len(ids) - redriven
        if skipped:
            self.message_user(
                request,
                f"Skipped {skipped} dead letter(s): already redriven.",
                messages.WARNING,
            )

    # --- Clusters ---------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        # Before the stock URLs: their "<path:object_id>/" would take "clusters/".
        return [
            path(
                "clusters/",
                self.admin_site.admin_view(self.clusters_view),
                name="messaging_deadletter_clusters",
            ),
            *super().get_urls(),
        ]

    def clusters_view(self, request: HttpRequest) -> TemplateResponse:
        """Show open dead letters grouped by (subscription, last error)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = timezone.now()
        changelist = reverse("admin:messaging_deadletter_changelist")
        clusters = deadletter_clusters(now=now)
        rows = [
            (c, f"{changelist}?{cluster_query(c.subscription, c.last_error)}")
            for c in clusters
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Open dead letters by error",
            "rows": rows,
            "total": sum(c.count for c in clusters),
            "now": now,
        }
        return TemplateResponse(
            request, "admin/messaging/deadletter/clusters.html", context
        )


def cluster_query(subscription: str, last_error: str) -> str:
    """Return the changelist query selecting one cluster's open letters."""
    return urlencode(
        {"state": "open", "subscription": subscription, "last_error": last_error}
    )


# Last: the depth admins reuse the helpers above (subscriptions, partitions, streams).
from messaging import admin_depth  # noqa: E402, F401

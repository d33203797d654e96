"""Subscription states: read-only apart from the "Start" and "Pause" actions."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from messaging.admin.common import ActionOnlyChangeMixin
from messaging.models import SubscriptionState
from messaging.registry import SUBSCRIPTIONS
from messaging.selectors import subscription_depth_rows
from messaging.services import subscription_start, subscription_states
from messaging.templatetags.messaging_admin import short_duration


@admin.register(SubscriptionState)
class SubscriptionStateAdmin(
    ActionOnlyChangeMixin, admin.ModelAdmin[SubscriptionState]
):
    list_display = [
        "name",
        "accepts",
        "lane",
        "partitions",
        "state",
        "starts_after",
        "depth",
        "lag",
        "oldest_pending",
    ]
    list_display_links = ["name"]
    list_filter = ["active"]
    ordering = ["name"]
    actions = ["start", "pause"]
    fields = readonly_fields = (
        "name",
        "accepts",
        "lane",
        "partitions",
        "state",
        "starts_after",
        "changed_at",
        "depth",
        "lag",
        "oldest_pending",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[SubscriptionState]:
        return subscription_depth_rows(super().get_queryset(request))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if self.has_view_or_change_permission(request):
            # One row per registered subscription, created as the relay would on its
            # next run (starting after the last relayed message): the same start,
            # so looking at the page changes no subscription's copies. A read when
            # no row is missing.
            subscription_states()
        return super().changelist_view(
            request, {"title": "Subscriptions", **(extra_context or {})}
        )

    @admin.display(description="accepts")
    def accepts(self, state: SubscriptionState) -> str:
        spec = SUBSCRIPTIONS.get(state.name)
        if spec is None:
            return "not in the registry"
        return ", ".join(sorted(spec.accepts))

    @admin.display(description="lane")
    def lane(self, state: SubscriptionState) -> str:
        spec = SUBSCRIPTIONS.get(state.name)
        return spec.lane if spec else "—"

    @admin.display(description="partitions")
    def partitions(self, state: SubscriptionState) -> str:
        spec = SUBSCRIPTIONS.get(state.name)
        return str(spec.partitions) if spec and spec.partitions else "—"

    @admin.display(description="state", ordering="active")
    def state(self, state: SubscriptionState) -> str:
        word = "active" if state.active else "paused"
        return format_html('<span class="sub-{}">{}</span>', word, word)

    @admin.display(description="depth", ordering="depth")
    def depth(self, state: Any) -> str:
        """Link the pending count to the subscription's pending deliveries."""
        if not state.depth:
            return "0"
        url = reverse("admin:messaging_delivery_changelist")
        query = urlencode({"status__exact": "pending", "subscription": state.name})
        return format_html('<a href="{}?{}">{}</a>', url, query, state.depth)

    @admin.display(description="lag (offsets)", ordering="lag")
    def lag(self, state: Any) -> int:
        return int(state.lag)

    @admin.display(description="oldest pending", ordering="oldest_pending_at")
    def oldest_pending(self, state: Any) -> str:
        since: datetime.datetime | None = state.oldest_pending_at
        if since is None:
            return "—"
        return short_duration(max(timezone.now() - since, datetime.timedelta(0)))

    @admin.action(description="Start selected subscriptions", permissions=["change"])
    def start(
        self, request: HttpRequest, queryset: QuerySet[SubscriptionState]
    ) -> None:
        self._switch(request, queryset, active=True)

    @admin.action(description="Pause selected subscriptions", permissions=["change"])
    def pause(
        self, request: HttpRequest, queryset: QuerySet[SubscriptionState]
    ) -> None:
        self._switch(request, queryset, active=False)

    def _switch(
        self,
        request: HttpRequest,
        queryset: QuerySet[SubscriptionState],
        *,
        active: bool,
    ) -> None:
        """Start or pause the selected subscriptions that are not so already.

        An active subscription is left alone by "Start": starting moves its start to
        the newest message, so starting it again would skip the messages published
        but not yet relayed to it.
        """
        verb, already = ("Started", "active") if active else ("Paused", "paused")
        changed: list[str] = []
        unchanged = unknown = 0
        for name, is_active in queryset.values_list("name", "active"):
            if name not in SUBSCRIPTIONS:
                unknown += 1
            elif is_active == active:
                unchanged += 1
            else:
                subscription_start(name, active=active)
                changed.append(name)
        if changed:
            self.message_user(
                request,
                f"{verb} {len(changed)} subscription(s): {', '.join(changed)}.",
                messages.SUCCESS,
            )
        if unchanged:
            self.message_user(
                request,
                f"Left {unchanged} subscription(s) as they were: already {already}.",
                messages.INFO,
            )
        if unknown:
            self.message_user(
                request,
                f"Skipped {unknown} subscription(s) no longer in the registry.",
                messages.WARNING,
            )

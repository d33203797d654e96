"""Dead letters: read-only, redriven by action; the clusters view groups by error."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from messaging.admin.common import _message_link, _pretty_json, _timestamp, _truncated
from messaging.models import DeadLetter
from messaging.selectors import deadletter_clusters
from messaging.services import deadletter_redrive
from messaging.templatetags.messaging_admin import short_duration


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

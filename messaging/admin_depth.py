"""The operator's admin for messaging depth: subscriptions, partitions, streams.

Imported by ``messaging.admin`` (its last line), which registers the spine's admins.
As there, every page is a view on rows that only the messaging services write:

- Subscriptions are read-only apart from the "Start" and "Pause" actions, which go
  through ``subscription_start``. Each row shows its depth, lag and oldest pending
  age (defined in ``selectors.subscription_depth_rows``).
- Partition leases are read-only: a worker may be renewing one right now. Each row
  shows its pending load and hot key, the page the loads of every partition.
- Stream consumers are read-only apart from "Rewind…", a confirmation page whose
  form calls ``stream_rewind``; the page shows where the log starts, since an
  offset below that is refused.
"""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from messaging.admin import ReadOnlyAdminMixin, _message_link, _truncated
from messaging.models import PartitionLease, StreamConsumer, SubscriptionState
from messaging.registry import STREAM_CONSUMERS, SUBSCRIPTIONS
from messaging.selectors import (
    partition_lease_rows,
    partitioned_loads,
    stream_consumer_rows,
    stream_overview,
    subscription_depth_rows,
)
from messaging.services import subscription_start, subscription_states
from messaging.streams import RewindError, offset_before, stream_rewind
from messaging.templatetags.messaging_admin import short_duration


def _user(request: HttpRequest) -> AbstractBaseUser | None:
    return request.user if isinstance(request.user, AbstractBaseUser) else None


class ActionOnlyChangeMixin:
    """Grant the change permission to actions only: no row is ever edited here.

    Actions ask with ``obj=None``; a row's page asks with the row and gets a
    read-only page.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Any | None = None
    ) -> bool:
        if obj is not None:
            return False
        return super().has_change_permission(request)  # type: ignore[misc, no-any-return]


# --- Subscriptions --------------------------------------------------------------------


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


# --- Partitions -----------------------------------------------------------------------


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
        return _message_link(lease.head_offset)

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


# --- Stream consumers -----------------------------------------------------------------


class UTCDateTimeField(forms.DateTimeField):
    """A date-time read as UTC unless it carries its own offset.

    The stock field reads the active time zone (the library's); an operator
    copying a time from the logs has it in UTC.
    """

    def to_python(self, value: Any) -> datetime.datetime | None:
        with timezone.override(datetime.UTC):
            return super().to_python(value)


class RewindForm(forms.Form):
    offset = forms.IntegerField(
        required=False,
        label="Offset",
        help_text="The last offset taken as applied: the replay starts after it.",
    )
    at = UTCDateTimeField(
        required=False,
        label="Or a time (UTC)",
        help_text="The replay starts at the first message published at or after it.",
        widget=forms.DateTimeInput(
            attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"
        ),
    )
    rebuild = forms.BooleanField(
        required=False,
        label="Rebuild the projection",
        help_text="Empty it first, in the same transaction: the replay rebuilds it.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        given = [f for f in ("offset", "at") if data.get(f) is not None]
        if len(given) != 1 and not self.errors:
            raise forms.ValidationError("Give either an offset or a time, not both.")
        return data


@admin.register(StreamConsumer)
class StreamConsumerAdmin(ActionOnlyChangeMixin, admin.ModelAdmin[StreamConsumer]):
    list_display = [
        "name",
        "offset",
        "gap",
        "state_mark",
        "error_preview",
        "applied_total",
        "rewound",
        "rewind_link",
    ]
    list_display_links = ["name"]
    list_select_related = ["rewound_by"]
    actions = ["rewind"]
    fields = readonly_fields = (
        "name",
        "offset",
        "gap",
        "state_mark",
        "last_error",
        "applied_total",
        "updated_at",
        "rewound_at",
        "rewound_by",
        "rewound_to",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[StreamConsumer]:
        return stream_consumer_rows(super().get_queryset(request))

    def get_urls(self) -> list[URLPattern]:
        # Before the stock URLs: their "<path:object_id>/" would take the page.
        return [
            path(
                "<str:name>/rewind/",
                self.admin_site.admin_view(self.rewind_view),
                name="messaging_streamconsumer_rewind",
            ),
            *super().get_urls(),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        listed = set(StreamConsumer.objects.values_list("name", flat=True))
        context = {
            "title": "Stream consumers",
            "log": stream_overview(),
            # Registered but never run: no row to select, but they can be rewound.
            "not_started": [n for n in STREAM_CONSUMERS if n not in listed],
        }
        return super().changelist_view(request, {**context, **(extra_context or {})})

    @admin.display(description="gap", ordering="gap")
    def gap(self, consumer: Any) -> int:
        return int(consumer.gap)

    @admin.display(description="state", ordering="state")
    def state_mark(self, consumer: StreamConsumer) -> str:
        return format_html(
            '<span class="stream-{}">{}</span>',
            consumer.state,
            consumer.state,
        )

    @admin.display(description="last error")
    def error_preview(self, consumer: StreamConsumer) -> str:
        return _truncated(consumer.last_error) or "—"

    @admin.display(description="rewound", ordering="rewound_at")
    def rewound(self, consumer: StreamConsumer) -> str:
        if consumer.rewound_at is None:
            return "—"
        when = timezone.localtime(consumer.rewound_at).strftime("%b %d %H:%M")
        who = consumer.rewound_by.get_username() if consumer.rewound_by else "?"
        return f"{when} by {who} to {consumer.rewound_to}"

    @admin.display(description="")
    def rewind_link(self, consumer: StreamConsumer) -> str:
        return format_html('<a href="{}">Rewind…</a>', _rewind_url(consumer.name))

    @admin.action(description="Rewind…", permissions=["change"])
    def rewind(
        self, request: HttpRequest, queryset: QuerySet[StreamConsumer]
    ) -> HttpResponse | None:
        """Open the confirmation page: nothing moves before its form is sent."""
        names = list(queryset.values_list("name", flat=True)[:2])
        if len(names) != 1:
            self.message_user(
                request, "Select exactly one consumer to rewind.", messages.WARNING
            )
            return None
        return HttpResponseRedirect(_rewind_url(names[0]))

    def rewind_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Ask for an offset or a time and whether to rebuild; rewind on POST.

        A refused offset (trimmed, negative) comes back as a form error.
        """
        if not self.has_change_permission(request):
            raise PermissionDenied
        if name not in STREAM_CONSUMERS:
            raise Http404(f"no stream consumer named {name!r}")
        form = RewindForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            at: datetime.datetime | None = form.cleaned_data["at"]
            offset = offset_before(at) if at else form.cleaned_data["offset"]
            rebuild: bool = form.cleaned_data["rebuild"]
            try:
                stream_rewind(name, offset=offset, rebuild=rebuild, user=_user(request))
            except RewindError as error:
                form.add_error(None, str(error))
            else:
                rebuilt = ", projection emptied for a rebuild" if rebuild else ""
                self.message_user(
                    request,
                    f"Rewound {name} to offset {offset}{rebuilt}: it replays from "
                    f"offset {offset + 1}.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse("admin:messaging_streamconsumer_changelist")
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Rewind {name}",
            "name": name,
            "consumer": StreamConsumer.objects.filter(name=name).first(),
            "log": stream_overview(),
            "form": form,
            "media": self.media + form.media,
        }
        return TemplateResponse(
            request, "admin/messaging/streamconsumer/rewind.html", context
        )


def _rewind_url(name: str) -> str:
    return reverse("admin:messaging_streamconsumer_rewind", args=[name])

"""Stream consumers: read-only apart from "Rewind…", a confirmation page."""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from messaging.admin.common import ActionOnlyChangeMixin, acting_user, preview_text
from messaging.models import StreamConsumer
from messaging.registry import STREAM_CONSUMERS
from messaging.selectors import stream_consumer_rows, stream_overview
from messaging.services.streams import RewindError, offset_before, stream_rewind


class UTCDateTimeField(forms.DateTimeField):
    """A date-time read as UTC unless it carries its own offset.

    The stock field reads the active time zone (the library's); an operator
    copying a time from the logs has it in UTC.
    """

    def to_python(self, value: Any) -> datetime.datetime | None:
        with timezone.override(datetime.UTC):
            return super().to_python(value)


# The offset column's range (a 64-bit BigIntegerField): a bigger number would only
# fail in the database driver (OverflowError, a 500) instead of on the form.
OFFSET_MAX = 2**63 - 1


class RewindForm(forms.Form):
    offset = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=OFFSET_MAX,
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
        help_text=(
            "Empty it first, in the same transaction: the replay rebuilds it"
            " (only from the start of the kept log)."
        ),
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
        return preview_text(consumer.last_error) or "—"

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

        A refused offset (negative, trimmed, past the newest message, beyond the
        64-bit range) comes back as a form error.
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
                stream_rewind(
                    name, offset=offset, rebuild=rebuild, user=acting_user(request)
                )
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

"""Dead letters: read-only; redriven or discarded by actions, each confirmed first.

The clusters view groups open letters by error (its signature: the text with the
values of one message taken out, ``messaging.signatures``) and redrives a whole
cluster. Every
action asks for its own permission (``messaging.redrive_deadletter``,
``messaging.discard_deadletter``), not the change permission: no letter is edited.
"""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from messaging.admin.common import (
    acting_user,
    json_block,
    outbox_link,
    preview_text,
    timestamp_column,
)
from messaging.errors import DeadLetterError
from messaging.models import DeadLetter
from messaging.selectors import dead_letter_clusters, dead_letter_rows
from messaging.services import (
    dead_letter_discard,
    dead_letter_redrive,
    dead_letter_redrive_cluster,
)
from messaging.services.dead_letters import DISCARD_REASON_MAX
from messaging.templatetags.messaging_admin import short_duration

# A confirmation page lists this many letters (those that killed workers first) and
# counts the rest: a cluster can hold thousands.
CONFIRM_LISTED = 100


class OpenFilter(admin.SimpleListFilter):
    """Open (waiting for an operator), redriven or discarded; all when not chosen."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("open", "Open"), ("redriven", "Redriven"), ("discarded", "Discarded")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "open":
            return queryset.filter(redriven_at__isnull=True, discarded_at__isnull=True)
        if self.value() == "redriven":
            return queryset.filter(redriven_at__isnull=False)
        if self.value() == "discarded":
            return queryset.filter(discarded_at__isnull=False)
        return queryset


class DiscardForm(forms.Form):
    reason = forms.CharField(
        max_length=DISCARD_REASON_MAX,
        label="Why",
        help_text="Kept on each letter with your name: why nobody will redrive it.",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
    )


class ErrorSignatureFilter(admin.SimpleListFilter):
    """Exact ``?error_signature=…``, as linked from the clusters view.

    Listing every distinct error in the sidebar would bury the other filters, so the
    filter shows only while it is in use (with "All" to leave it).
    """

    title = "error"
    parameter_name = "error_signature"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [] if value is None else [(value, preview_text(value))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(error_signature=value)


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
        "death_warning",
        "redriven",
    ]
    list_display_links = ["subscription"]
    list_filter = [OpenFilter, "subscription", "message_type", ErrorSignatureFilter]
    search_fields = ["=delivery__message__id", "last_error"]
    list_select_related = ["delivery", "redriven_by", "discarded_by"]
    actions = ["redrive", "discard"]
    list_per_page = 50
    fields = readonly_fields = (
        "subscription",
        "message_type",
        "message_offset",
        "delivery",
        "attempts",
        "death_warning",
        "last_error",
        "first_failed_at",
        "last_failed_at",
        "created_at",
        "redriven_at",
        "redriven_by",
        "redrive_count",
        "discarded_at",
        "discarded_by",
        "discard_reason",
        "pretty_body",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeadLetter]:
        return dead_letter_rows(super().get_queryset(request))

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
        # A letter is never edited, so its page is read-only; the actions ask for
        # permissions of their own below.
        return False

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("messaging.redrive_deadletter")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("messaging.discard_deadletter")

    # Minutes are enough here: letters wait for a person, not for a backoff.
    first_failed = timestamp_column("first_failed_at", "first failed", seconds=False)
    last_failed = timestamp_column("last_failed_at", "last failed", seconds=False)

    @admin.display(description="redriven / discarded", ordering="redriven_at")
    def redriven(self, letter: DeadLetter) -> str:
        """Return when and by whom, with the count once it is more than one.

        An open letter with a count was redriven before and died again.
        """
        count = letter.redrive_count
        if letter.discarded_at is not None:
            when = timezone.localtime(letter.discarded_at).strftime("%b %d %H:%M")
            who = letter.discarded_by.get_username() if letter.discarded_by else "?"
            return f"discarded {when} by {who}: {preview_text(letter.discard_reason)}"
        if letter.redriven_at is None:
            return f"redriven before ({count})" if count else "—"
        when = timezone.localtime(letter.redriven_at).strftime("%b %d %H:%M")
        who = letter.redriven_by.get_username() if letter.redriven_by else "?"
        return f"{when} by {who}" + (f" ({count} times)" if count > 1 else "")

    @admin.display(description="message", ordering="delivery__message_id")
    def message_offset(self, letter: DeadLetter) -> str:
        return format_html(
            "{} {}", outbox_link(letter.delivery.message_id), letter.message_type
        )

    @admin.display(description="last error")
    def error_preview(self, letter: DeadLetter) -> str:
        return preview_text(letter.last_error)

    @admin.display(description="age", ordering="-last_failed_at")
    def age(self, letter: DeadLetter) -> str:
        """Return how long an open letter has waited since it went dead."""
        if not letter.is_open:
            return "—"
        return short_duration(timezone.now() - letter.last_failed_at)

    @admin.display(description="warning", ordering="-worker_deaths")
    def death_warning(self, letter: DeadLetter) -> str:
        """Warn that the letter killed its worker before: a redrive may kill another.

        ``worker_deaths`` is annotated by ``dead_letter_rows`` (0 unless open).
        """
        deaths = int(getattr(letter, "worker_deaths", 0))
        if deaths <= 0:
            return ""
        return format_html(
            '<span class="dead-letter-killer" title="{}">'
            "⚠ killed a worker in {} attempt(s)</span>",
            "Earlier attempts ended with no failure recorded: the worker died "
            "(or lost its lease) while running it. A redrive may kill another.",
            deaths,
        )

    @admin.display(description="body")
    def pretty_body(self, letter: DeadLetter) -> str:
        return json_block(letter.body)

    @admin.action(description="Redrive selected dead letters…", permissions=["redrive"])
    def redrive(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> TemplateResponse | None:
        """Show the letters (those that killed workers first); redrive on "yes"."""
        if request.POST.get("post") != "yes":
            return self._confirmation(
                request,
                queryset,
                verb="Redrive",
                hidden={"action": "redrive"},
                selected=True,
            )
        ids = list(queryset.values_list("pk", flat=True))
        redriven = dead_letter_redrive(ids=ids, user=acting_user(request))
        self._report(request, "Redrove", redriven)
        self._report_skipped(request, len(ids), redriven)
        return None

    @admin.action(description="Discard selected dead letters…", permissions=["discard"])
    def discard(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> TemplateResponse | None:
        """Ask why; archive the open letters among the selected with who and why."""
        form = DiscardForm(request.POST if request.POST.get("post") == "yes" else None)
        if form.is_valid():
            ids = list(queryset.values_list("pk", flat=True))
            try:
                discarded = dead_letter_discard(
                    ids=ids,
                    user=acting_user(request),
                    reason=form.cleaned_data["reason"],
                )
            except DeadLetterError as error:
                form.add_error("reason", str(error))
            else:
                self._report(request, "Discarded", discarded)
                self._report_skipped(request, len(ids), discarded)
                return None
        return self._confirmation(
            request,
            queryset,
            verb="Discard",
            hidden={"action": "discard"},
            selected=True,
            form=form,
        )

    def _report(self, request: HttpRequest, done: str, count: int) -> None:
        if count:
            self.message_user(
                request, f"{done} {count} dead letter(s).", messages.SUCCESS
            )

    def _report_skipped(self, request: HttpRequest, asked: int, done: int) -> None:
        if asked > done:
            self.message_user(
                request,
                f"Skipped {asked - done} dead letter(s): already redriven or "
                "discarded.",
                messages.WARNING,
            )

    def _confirmation(
        self,
        request: HttpRequest,
        letters: QuerySet[DeadLetter],
        *,
        verb: str,
        hidden: dict[str, str],
        selected: bool,
        form: forms.Form | None = None,
        cluster: tuple[str, str] | None = None,
    ) -> TemplateResponse:
        """Render the page that shows what an action will touch before it does.

        Only open letters are acted on, so only they are listed; the ones that
        killed their worker come first, each with its warning.
        """
        chosen = letters.filter(redriven_at__isnull=True, discarded_at__isnull=True)
        total = chosen.count()
        # A Q, not a keyword: the stubs do not see the annotation of dead_letter_rows.
        killers = chosen.filter(Q(worker_deaths__gt=0)).count()
        listed = list(
            chosen.select_related("delivery").order_by(
                "-worker_deaths", "-last_failed_at", "pk"
            )[:CONFIRM_LISTED]
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{verb} {total} dead letter{'s' if total != 1 else ''}?",
            "verb": verb,
            "letters": [(x, self.death_warning(x)) for x in listed],
            "total": total,
            "unlisted": total - len(listed),
            "killers": killers,
            # Selected letters already redriven or discarded: left alone.
            "left_alone": letters.count() - total if selected else 0,
            # The action form re-posts the selection; a cluster its key instead.
            "selected_ids": (
                list(letters.values_list("pk", flat=True)) if selected else []
            ),
            "hidden": hidden,
            "form": form,
            "cluster": cluster,
            "media": self.media + (form.media if form else forms.Media()),
        }
        return TemplateResponse(
            request, "admin/messaging/deadletter/confirm.html", context
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
            path(
                "clusters/redrive/",
                self.admin_site.admin_view(self.redrive_cluster_view),
                name="messaging_deadletter_redrive_cluster",
            ),
            *super().get_urls(),
        ]

    def clusters_view(self, request: HttpRequest) -> TemplateResponse:
        """Show open dead letters grouped by (subscription, error signature)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = timezone.now()
        changelist = reverse("admin:messaging_deadletter_changelist")
        clusters = dead_letter_clusters(now=now)
        redrive = reverse("admin:messaging_deadletter_redrive_cluster")
        rows = [
            (
                c,
                f"{changelist}?{cluster_query(c.subscription, c.signature)}",
                f"{redrive}?{urlencode(_cluster_key(c.subscription, c.signature))}",
            )
            for c in clusters
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Open dead letters by error",
            "rows": rows,
            "total": sum(c.count for c in clusters),
            "now": now,
            "may_redrive": self.has_redrive_permission(request),
        }
        return TemplateResponse(
            request, "admin/messaging/deadletter/clusters.html", context
        )

    def redrive_cluster_view(self, request: HttpRequest) -> HttpResponse:
        """Show one cluster's open letters with their warnings; redrive it on POST.

        The page carries the moment it was drawn, and the redrive takes only the
        letters that were already in the cluster then: none goes back unseen.
        """
        if not self.has_redrive_permission(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        subscription = data.get("subscription")
        signature = data.get("signature")
        if subscription is None or signature is None:
            return HttpResponseBadRequest("name a cluster: subscription and signature")
        if request.method == "POST":
            try:
                shown_at = datetime.datetime.fromisoformat(data.get("shown_at", ""))
                shown = int(data.get("shown", ""))
            except ValueError:
                return HttpResponseBadRequest("the confirmation page sent no moment")
            if shown_at.tzinfo is None:
                return HttpResponseBadRequest("the moment carries no time zone")
            redriven = dead_letter_redrive_cluster(
                subscription=subscription,
                signature=signature,
                failed_upto=shown_at,
                user=acting_user(request),
            )
            self._report(request, "Redrove", redriven)
            if shown > redriven:
                self.message_user(
                    request,
                    f"Skipped {shown - redriven} dead letter(s): redriven, discarded "
                    "or failed again since the page was shown.",
                    messages.WARNING,
                )
            return HttpResponseRedirect(reverse("admin:messaging_deadletter_clusters"))
        now = timezone.now()
        # Only letters dead by ``now`` are listed, and the POST redrives only those
        # (still open then): one that dies while the page is drawn waits.
        letters = self.get_queryset(request).filter(
            subscription=subscription,
            error_signature=signature,
            last_failed_at__lte=now,
        )
        return self._confirmation(
            request,
            letters,
            verb="Redrive",
            hidden={
                **_cluster_key(subscription, signature),
                "shown_at": now.isoformat(),
            },
            selected=False,
            cluster=(subscription, signature),
        )


def cluster_query(subscription: str, signature: str) -> str:
    """Return the changelist query selecting one cluster's open letters."""
    return urlencode(
        {"state": "open", "subscription": subscription, "error_signature": signature}
    )


def _cluster_key(subscription: str, signature: str) -> dict[str, str]:
    return {"subscription": subscription, "signature": signature}

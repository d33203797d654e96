"""Helpers shared by the messaging admins: columns, links and permission mixins.

The read-only mixin is ``jobs.admin_mixins.ReadOnlyAdminMixin``, shared with jobs.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

import django_stubs_ext
from django.contrib import admin
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator

from messaging.models import Delivery

# Makes ``ModelAdmin[OutboxMessage]`` subscriptable at run time; idempotent.
django_stubs_ext.monkeypatch()

# Keyed by the plain values: the rows hold strings, not Status members.
STATUS_MARK: dict[str, str] = {
    Delivery.Status.PENDING.value: "⟳",
    Delivery.Status.DONE.value: "✓",
    Delivery.Status.DEAD.value: "✗",
}
ERROR_PREVIEW = 80


def preview_text(text: str) -> str:
    return Truncator(text).chars(ERROR_PREVIEW)


def outbox_link(message_id: int) -> str:
    url = reverse("admin:messaging_outboxmessage_change", args=[message_id])
    return format_html('<a href="{}">#{}</a>', url, message_id)


def timestamp_column(
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


def json_block(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre style="margin: 0">{}</pre>', text)


def acting_user(request: HttpRequest) -> AbstractBaseUser | None:
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

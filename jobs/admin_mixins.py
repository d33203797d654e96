"""Permission mixins shared by the admins of jobs and of the apps above it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """Refuse add, change and delete; view permission is enough to read.

    ``obj`` is optional everywhere so the mixin suits a ModelAdmin and an inline.
    """

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

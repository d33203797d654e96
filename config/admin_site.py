"""The project's admin site: the stock site plus pages the apps add from ``ready()``.

It is made the default ``admin.site`` by ``config.admin_apps.ProjectAdminConfig``
(Django's "Overriding the default admin site"), so ``config/urls.py`` and every
``admin.site.register`` keep working unchanged. The site knows no app: an app adds
its pages with ``add_pages`` from its ``AppConfig.ready()``, which keeps ``config``
at the bottom of the imports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite, ModelAdmin, helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponseBase
from django.urls import URLPattern, URLResolver

# Builds an app's admin URL patterns for a site (its ``admin_view`` and context).
AdminPages = Callable[[AdminSite], Sequence[URLPattern | URLResolver]]


class GuardedInputMixin:
    """Answer malformed changelist input the way the admin answers other bad input.

    Two holes of the stock ModelAdmin turned a crafted request into a 500: a date
    hierarchy year too large for ``datetime`` (``?created_at__year=99999999999``:
    OverflowError, where the admin catches only ValueError), and an action posted
    with a selected id that is not one (``_selected_action=x``: the queryset's
    ValueError or ValidationError; past the column's range, SQLite's
    OverflowError). The first becomes the admin's "incorrect lookup" redirect
    (``?e=1``), the second a warning on the list, as when nothing is selected.
    """

    model: type[Model]

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        try:
            return super().get_changelist_instance(request)  # type: ignore[misc]
        except OverflowError as error:
            raise IncorrectLookupParameters(error) from error

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponseBase | None:
        pk = self.model._meta.pk
        assert pk is not None
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                # Its range too: SQLite cannot even bind an integer past 64 bits.
                pk.run_validators(pk.to_python(value))
        except (ValidationError, ValueError, OverflowError):
            messages.warning(request, "The selection names no item of this list.")
            return None  # the changelist redirects back to itself
        answer: HttpResponseBase | None = super().response_action(  # type: ignore[misc]
            request, queryset
        )
        return answer


class ProjectAdminSite(AdminSite):
    """``AdminSite`` whose URLs start with the pages the apps added."""

    def __init__(self, name: str = "admin") -> None:
        super().__init__(name)
        self._pages: list[AdminPages] = []

    def add_pages(self, pages: AdminPages) -> None:
        """Add ``pages`` (once: adding the same builder again does nothing).

        Call before the URLconf is first loaded; ``get_urls`` runs on the first
        request.
        """
        if pages not in self._pages:
            self._pages.append(pages)

    def register(
        self,
        model_or_iterable: type[Model] | Iterable[type[Model]],
        admin_class: type[ModelAdmin[Any]] | None = None,
        **options: Any,
    ) -> None:
        """Register as the stock site does, with ``GuardedInputMixin`` mixed in.

        Every ModelAdmin gets it, the apps' and those Django and django-rq
        register, so no list of the site can be crashed by its query or actions.
        """
        base = admin_class or ModelAdmin
        if not issubclass(base, GuardedInputMixin):
            base = type(base.__name__, (GuardedInputMixin, base), {})
        super().register(model_or_iterable, base, **options)

    def get_urls(self) -> list[URLResolver | URLPattern]:
        # Before the stock URLs: their "<app_label>/" catch-all would take ours.
        added = [pattern for pages in self._pages for pattern in pages(self)]
        return [*added, *super().get_urls()]

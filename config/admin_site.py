"""The project's admin site: the stock site plus pages the apps add from ``ready()``.

It is made the default ``admin.site`` by ``config.admin_apps.ProjectAdminConfig``
(Django's "Overriding the default admin site"), so ``config/urls.py`` and every
``admin.site.register`` keep working unchanged. The site knows no app: an app adds
its pages with ``add_pages`` from its ``AppConfig.ready()``, which keeps ``config``
at the bottom of the imports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.contrib.admin import AdminSite
from django.urls import URLPattern, URLResolver

# Builds an app's admin URL patterns for a site (its ``admin_view`` and context).
AdminPages = Callable[[AdminSite], Sequence[URLPattern | URLResolver]]


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

    def get_urls(self) -> list[URLResolver | URLPattern]:
        # Before the stock URLs: their "<app_label>/" catch-all would take ours.
        added = [pattern for pages in self._pages for pattern in pages(self)]
        return [*added, *super().get_urls()]

"""The admin app's configuration, naming the project's site as the default.

Kept apart from ``config.admin_site``: settings load this module while the app
registry is being populated, and the site module imports admin code that needs it.
"""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class ProjectAdminConfig(AdminConfig):
    default_site = "config.admin_site.ProjectAdminSite"

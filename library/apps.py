from django.apps import AppConfig


class LibraryConfig(AppConfig):
    name = "library"
    verbose_name = "Library"

    def ready(self) -> None:
        # Imported here: the modules reach the admin site and the cache, which need
        # the app registry.
        from django.contrib import admin

        import library.subscribers  # noqa: F401  (binds the library's handlers)
        from config.admin_site import ProjectAdminSite
        from jobs.access import jobstatus_access_register
        from jobs.resumable import resumable_kind_register
        from jobs.scheduler import periodic_tasks_register
        from library.admin_metrics import cache_metrics_pages
        from library.admin_operations import operations_history_pages
        from library.periodic import PERIODIC_TASKS
        from library.report import REPORT_KIND, report_resume
        from library.report.selectors import report_readable
        from library.telemetry import telemetry_register

        # admin.site is the default site that config.admin_apps names.
        site = admin.site
        assert isinstance(site, ProjectAdminSite), "config.admin_apps sets the site"
        site.add_pages(cache_metrics_pages)
        site.add_pages(operations_history_pages)
        telemetry_register()
        periodic_tasks_register(*PERIODIC_TASKS)
        # The monthly report keeps a checkpoint: the admin's "Resume selected" and
        # the status payload's "resumable" ask jobs.resumable, which knows no kind.
        resumable_kind_register(REPORT_KIND, report_resume)
        # A report's status and result: its starter's, and any holder of the right.
        jobstatus_access_register(REPORT_KIND, report_readable)

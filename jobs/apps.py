from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        # Imported here: it reads rq queues and settings, which need the app registry.
        from django.contrib import admin

        from config.admin_site import ProjectAdminSite
        from jobs.admin_bounds import bounded_queue_pages
        from jobs.periodic import PERIODIC_TASKS
        from jobs.scheduler import periodic_tasks_register
        from jobs.telemetry import telemetry_register

        telemetry_register()
        periodic_tasks_register(*PERIODIC_TASKS)
        site = admin.site
        assert isinstance(site, ProjectAdminSite), "config.admin_apps sets the site"
        site.add_pages(bounded_queue_pages)

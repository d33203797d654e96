from django.apps import AppConfig


class LibraryConfig(AppConfig):
    name = "library"
    verbose_name = "Library"

    def ready(self) -> None:
        # Imported here: the modules reach the admin site and the cache, which need
        # the app registry.
        import library.subscribers  # noqa: F401  (binds the library's handlers)
        from jobs.scheduler import periodic_tasks_register
        from library.admin_metrics import cache_metrics_install
        from library.admin_operations import operations_history_install
        from library.periodic import PERIODIC_TASKS
        from library.telemetry import telemetry_register

        cache_metrics_install()
        operations_history_install()
        telemetry_register()
        periodic_tasks_register(*PERIODIC_TASKS)

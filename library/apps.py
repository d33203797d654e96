from django.apps import AppConfig


class LibraryConfig(AppConfig):
    name = "library"
    verbose_name = "Library"

    def ready(self) -> None:
        # Imported here: the module reaches the admin site and the cache, which need
        # the app registry.
        from library.admin_metrics import cache_metrics_install

        cache_metrics_install()

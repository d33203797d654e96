from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    name = "realtime"

    def ready(self) -> None:
        # Imported for its decorators: it binds the broadcast subscription's handler
        # and after-batch step in the messaging registry.
        import realtime.broadcast  # noqa: F401

from django.apps import AppConfig


class MessagingConfig(AppConfig):
    name = "messaging"

    def ready(self) -> None:
        # Imported here: the sampler queries the models, which need the app registry.
        from messaging.telemetry import telemetry_register

        telemetry_register()

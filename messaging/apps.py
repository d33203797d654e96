from django.apps import AppConfig
from django.core import checks


class MessagingConfig(AppConfig):
    name = "messaging"

    def ready(self) -> None:
        # Imported here: the sampler queries the models, which need the app registry.
        from jobs.scheduler import periodic_tasks_register
        from messaging.checks import registry_check
        from messaging.periodic import PERIODIC_TASKS
        from messaging.telemetry import telemetry_register

        checks.register(registry_check)
        telemetry_register()
        periodic_tasks_register(*PERIODIC_TASKS)

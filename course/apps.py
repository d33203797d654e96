from django.apps import AppConfig


class CourseConfig(AppConfig):
    name = "course"

    def ready(self) -> None:
        # Imported here: the probes' handlers use the models, which need the app
        # registry. Importing binds the handlers; the call declares type and lanes.
        from course.instruments.probes import probes_register
        from course.periodic import PERIODIC_TASKS
        from jobs.scheduler import periodic_tasks_register

        probes_register()
        periodic_tasks_register(*PERIODIC_TASKS)

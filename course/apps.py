from django.apps import AppConfig


class CourseConfig(AppConfig):
    name = "course"

    def ready(self) -> None:
        # Imported here: the probes' handlers use the models, which need the app
        # registry. Importing binds the handlers; the call declares type and lanes.
        from course.access import lab_run_readable
        from course.instruments.probes import probes_register
        from course.periodic import PERIODIC_TASKS
        from course.selectors import LAB_JOB_KIND
        from jobs.access import jobstatus_access_register
        from jobs.scheduler import periodic_tasks_register

        probes_register()
        periodic_tasks_register(*PERIODIC_TASKS)
        # A lab run's status is its visitor's, signed in or not (course.access).
        jobstatus_access_register(LAB_JOB_KIND, lab_run_readable)

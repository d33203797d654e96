from django.urls import URLPattern, path

from jobs import views

# The monthly report's pages share this prefix (library.report.urls, included at
# "jobs/" too by config.urls): only the generic JobStatus poll lives here.
urlpatterns: list[URLPattern] = [
    path("<uuid:job_id>/status", views.jobstatus_status, name="jobstatus-status"),
]

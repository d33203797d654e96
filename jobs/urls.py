from django.urls import URLPattern, path

from jobs import views

urlpatterns: list[URLPattern] = [
    path("<uuid:job_id>/status", views.jobstatus_status, name="jobstatus-status"),
]

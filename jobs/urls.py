from django.urls import URLPattern, path

from jobs import views

urlpatterns: list[URLPattern] = [
    path("<uuid:job_id>/status", views.jobstatus_status, name="jobstatus-status"),
    path("reports/monthly/", views.report_start, name="report-start"),
    path("<uuid:job_id>/", views.report_detail, name="report-detail"),
    path("<uuid:job_id>/cancel", views.report_cancel_view, name="report-cancel"),
    path("<uuid:job_id>/resume", views.report_resume_view, name="report-resume"),
    path("<uuid:job_id>/report.csv", views.report_download, name="report-download"),
]

"""The monthly report's pages, included at ``jobs/`` by config.urls.

The prefix is where the pages lived before the report moved to the library (issue
#13): the addresses browsers know stay. The JobStatus poll the detail page reads,
``jobstatus-status``, is the jobs app's (jobs.urls, same prefix).
"""

from django.urls import URLPattern, path

from library.report import views

urlpatterns: list[URLPattern] = [
    path("reports/monthly/", views.report_start, name="report-start"),
    path("<uuid:job_id>/", views.report_detail, name="report-detail"),
    path("<uuid:job_id>/cancel", views.report_cancel_view, name="report-cancel"),
    path("<uuid:job_id>/resume", views.report_resume_view, name="report-resume"),
    path("<uuid:job_id>/report.csv", views.report_download, name="report-download"),
]

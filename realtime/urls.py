from django.urls import path

from realtime import upgrade, views

urlpatterns = [
    path("branches/<int:branch_id>/live/", views.branch_live, name="branch-live"),
    # Polling and server-sent events (realtime.polling, realtime.sse).
    path("realtime/jobs/<uuid:job_id>/status", views.job_status_short),
    path("realtime/jobs/<uuid:job_id>/wait", views.job_wait, name="realtime-job-wait"),
    path(
        "realtime/jobs/<uuid:job_id>/events",
        views.job_events,
        name="realtime-job-events",
    ),
    path(
        "realtime/branches/<int:branch_id>/events",
        views.branch_events,
        name="realtime-branch-events",
    ),
    path("realtime/metrics", views.realtime_metrics, name="realtime-metrics"),
    *upgrade.urlpatterns,
]

from django.contrib import admin
from django.urls import include, path
from django_rq.urls import urlpatterns as rq_urlpatterns

from jobs.admin_rq import rq_operator_patterns
from library.exposition import prometheus_metrics

urlpatterns = [
    # django-rq's views check only is_staff: each passes its permission first.
    path("admin/rq/", include((rq_operator_patterns(rq_urlpatterns), "django_rq"))),
    path("admin/", admin.site.urls),
    # Prometheus's default metrics_path; a token or the view_operations permission.
    path("metrics", prometheus_metrics, name="metrics"),
    # Learner accounts (django-allauth): sign up, sign in and out, e-mail, password.
    path("accounts/", include("allauth.urls")),
    path("account/", include("course.account_urls")),
    path("course/", include("course.urls")),
    path("jobs/", include("jobs.urls")),
    # The monthly report's pages (library.report) kept their /jobs/ addresses.
    path("jobs/", include("library.report.urls")),
    # Lab-only routes (404 unless LAB_ROUTES), at the root where the labs call them.
    path("", include("course.instruments.urls")),
    path("", include("realtime.urls")),
    path("", include("library.urls")),
]

handler400 = "library.views.bad_request"
handler403 = "library.views.permission_denied"
handler404 = "library.views.page_not_found"
# Not one of Django's: django-allauth answers a rate-limited request with it.
handler429 = "library.views.too_many_requests"
handler500 = "library.views.server_error"

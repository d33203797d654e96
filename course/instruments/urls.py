"""Lab-only routes, included at the site's root by ``config.urls``: their paths predate
the course's ``/course/`` prefix, and the labs, tests and benchmarks call them there."""

from django.urls import URLPattern, path

from course.instruments import lab_views

urlpatterns: list[URLPattern] = [
    path("_lab/broadcast/<int:branch_id>/", lab_views.lab_broadcast),
]

"""The learner's own pages, at /account/ (allauth's are at /accounts/)."""

from django.urls import URLPattern, path

from course import account_views

urlpatterns: list[URLPattern] = [
    path("", account_views.account_home, name="account"),
    path("delete/", account_views.account_delete_view, name="account-delete"),
]

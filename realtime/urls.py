from django.urls import path

from realtime import views

urlpatterns = [
    path("branches/<int:branch_id>/live/", views.branch_live, name="branch-live"),
]

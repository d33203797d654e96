from django.urls import URLPattern, path

from course.drills import signin, views

urlpatterns: list[URLPattern] = [
    path("", views.drills_index, name="drills-index"),
    # Before the drill routes: "enter" is no drill's slug. Answers only on a sandbox.
    path("enter/<str:token>/", signin.drill_enter, name="drill-enter"),
    path("<slug:slug>/", views.drill_page, name="drill-page"),
    path("<slug:slug>/status.json", views.drill_status_json, name="drill-status"),
    path("<slug:slug>/start", views.drill_start_view, name="drill-start"),
    path("<slug:slug>/check", views.drill_check_view, name="drill-check"),
    path("<slug:slug>/link", views.drill_link_view, name="drill-link"),
    path("<slug:slug>/stop", views.drill_stop_view, name="drill-stop"),
]

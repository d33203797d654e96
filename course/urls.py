from django.urls import URLPattern, path

from course import views

urlpatterns: list[URLPattern] = [
    path("", views.course_index, name="course-index"),
    path("<slug:slug>/", views.course_lesson, name="course-lesson"),
    path("<slug:slug>/run", views.course_lab_run, name="course-lab-run"),
]

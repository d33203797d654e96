from django.urls import URLPattern, URLResolver, include, path

from course import challenge_views, views

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.course_index, name="course-index"),
    # Before the lesson routes: "drills" is not a lesson slug.
    path("drills/", include("course.drills.urls")),
    # Before the lesson routes: "source" is not a lesson slug.
    path("source/<path:path>", views.course_source, name="course-source"),
    path("<slug:slug>/", views.course_lesson, name="course-lesson"),
    path("<slug:slug>/run", views.course_lab_run, name="course-lab-run"),
    path("<slug:slug>/model.json", views.course_lesson_model, name="course-model"),
    path("<slug:slug>/progress", views.course_progress, name="course-progress"),
    path("<slug:slug>/compare", views.course_runs_compared, name="course-compare"),
    path(
        "<slug:slug>/challenges/<slug:challenge_id>",
        challenge_views.course_challenge,
        name="course-challenge",
    ),
    path(
        "<slug:slug>/challenges/<slug:challenge_id>/live",
        challenge_views.course_challenge_live,
        name="course-challenge-live",
    ),
    path(
        "<slug:slug>/runs/<uuid:job_id>/explained",
        views.course_run_explained,
        name="course-run-explained",
    ),
]

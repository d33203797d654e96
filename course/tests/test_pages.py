import pytest

from course.labs.registry import LABS, lab_load, package_name
from course.tests.labwork import own_run
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db


def test_index_lists_25_lessons_by_area_with_lab_state(client):
    response = client.get("/course/")
    assert response.status_code == 200
    html = response.content.decode()
    for area in ("Caching", "Messaging", "Background Jobs", "Real-Time Data"):
        assert f">{area}</h2>" in html
    assert html.count('class="lesson-card') == 25
    assert html.count('<span class="badge badge-primary">lab</span>') == len(LABS)
    assert 'href="/course/streaming-responses/"' in html


def test_lesson_page_shows_summary_source_and_form_defaults(client):
    response = client.get("/course/cache-layers/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1>Cache Layers</h1>" in html
    assert "https://academia.sh/en/courses/asynchronous-processing/cache-layers" in html
    assert 'name="requests" value="600"' in html
    assert 'name="seed" value="20250729"' in html
    assert 'action="/course/cache-layers/run"' in html
    assert 'id="lab-config"' in html
    assert "csrfmiddlewaretoken" in html


def test_a_lesson_without_its_lab_fails_the_registry_at_import():
    # Each lesson's lab is its package, found by the slug; none may be missing.
    with pytest.raises(RuntimeError, match="lesson 'no-such-lesson' has no lab"):
        lab_load("no-such-lesson")
    assert package_name("hot-key-and-stampede-effect") == (
        "course.labs.hot_key_and_stampede_effect"
    )


def test_unknown_lesson_is_404(client):
    assert client.get("/course/no-such-lesson/").status_code == 404


def test_reload_with_finished_job_shows_its_tables(client):
    job = JobStatus.objects.create(
        kind="lab",
        name="cache-layers",
        params={"requests": 300},
        state="done",
        result={
            "lesson": "cache-layers",
            "params": {},
            "tables": {"repetition": {"columns": ["requests"], "rows": [[300]]}},
        },
    )
    own_run(client, job)  # the browser's own run
    html = client.get(f"/course/cache-layers/?job={job.id}").content.decode()
    assert 'name="requests" value="300"' in html  # the form shows that run's values
    assert "<code>repetition</code>" in html
    assert f'"id": "{job.id}"' in html  # handed to lab.js to resume


# A fixed unknown id: collection must be the same in every xdist worker.
@pytest.mark.parametrize("job", ["not-a-uuid", "5b0d7f6e-1c2a-4e8b-9d3f-6a7b8c9d0e1f"])
def test_reload_with_unknown_job_says_so(client, job):
    response = client.get(f"/course/cache-layers/?job={job}")
    assert response.status_code == 200
    assert b"could not be found" in response.content

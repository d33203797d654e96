import pytest

from course.labs.registry import LABS
from course.lessons import LESSONS
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


def test_unbuilt_lab_says_so_without_numbers(client, monkeypatch):
    # Every lesson has its lab now: take one away to see the page without it.
    slug = LESSONS[-1].slug
    monkeypatch.delitem(LABS, slug)
    html = client.get(f"/course/{slug}/").content.decode()
    assert "not built yet" in html
    assert '<form id="lab-form"' not in html
    assert f"https://academia.sh/en/courses/asynchronous-processing/{slug}" in html


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

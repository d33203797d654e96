"""Runs are records: who ran what is kept, listed, compared, and bounded per visitor."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, override_settings
from django.utils.timezone import now as django_now

from course.compare import chart_pair, params_compared, tables_compared
from course.labs.harness.base import Chart
from course.labs.registry import lab_get
from course.models import LabRun
from course.selectors import lab_runs_recent
from course.services.labqueue import Requester, lab_run_request
from course.services.labwork import lab_queue_announce, lab_worker_seen, place_text
from course.tests.labwork import run_waiting
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def learner():
    user = get_user_model().objects.create_user("learner", password="pw-learner-1")
    client = Client()
    client.force_login(user)
    return user, client


def run(client: Client, slug: str = "cache-layers", **params: str) -> str:
    response = client.post(
        f"/course/{slug}/run", params, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 202, response.content
    return str(response.json()["job"])


def test_a_learners_runs_are_kept_listed_and_comparable(
    learner, redis_client, django_capture_on_commit_callbacks
):
    user, client = learner
    with django_capture_on_commit_callbacks(execute=False):
        first = run(client)
        second = run(client, edge_capacity="5", prediction="12.5")
    assert run_waiting() == 2  # what a lab worker does

    runs = lab_runs_recent(slug="cache-layers", visitor=f"user:{user.pk}")
    assert [str(row.job.id) for row in runs] == [second, first]
    assert runs[0].changed == (("edge_capacity", "5"),)
    assert runs[0].previous == uuid.UUID(first)
    assert runs[1].changed == ()
    assert runs[1].previous is None

    html = client.get("/course/cache-layers/").content.decode()
    assert "Your runs" in html
    assert f"run={first}&amp;run={second}" in html  # "vs previous"
    assert "edge_capacity=5" in html

    page = client.get(f"/course/cache-layers/compare?run={first}&run={second}")
    assert page.status_code == 200
    text = page.content.decode()
    # The changed parameter's row is marked, and so are cells that moved with it.
    assert re.search(r'<tr class="is-moved"><th scope="row"><code>edge_capacity', text)
    assert 'class="is-moved"' in text.split("compare-pair", 1)[1]
    assert "compare-charts-data" in text


def test_someone_elses_runs_are_not_listed(learner, django_capture_on_commit_callbacks):
    _, client = learner
    with django_capture_on_commit_callbacks(execute=False):
        run(client)
    other = get_user_model().objects.create_user("other", password="pw-other-12")
    visitor = Client()
    visitor.force_login(other)
    assert "Your runs" not in visitor.get("/course/cache-layers/").content.decode()


def test_an_anonymous_visitor_finds_their_runs_again_by_session(
    client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        job = run(client)
    record = LabRun.objects.get()
    assert record.visitor.startswith("anon:")
    assert client.session.session_key not in record.visitor  # not the session key
    assert client.session["lab_visitor"] not in record.visitor  # a digest of a token
    assert job in client.get("/course/cache-layers/").content.decode()
    assert "Your runs" not in Client().get("/course/cache-layers/").content.decode()


@override_settings(LAB_RUNS_PER_VISITOR=2)
def test_a_visitor_may_have_only_a_few_runs_in_flight(
    client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        run(client)
        run(client)
        refused = client.post(
            "/course/cache-layers/run", {}, HTTP_ACCEPT="application/json"
        )
        page = client.post("/course/cache-layers/run", {})
    assert refused.status_code == 429
    assert "2 runs waiting or running" in refused.json()["error"]
    assert page.status_code == 429
    assert "let one finish" in page.content.decode()  # the message, on the lesson
    assert JobStatus.objects.count() == 2
    # Another visitor is not held up by this one.
    with django_capture_on_commit_callbacks(execute=False):
        run(Client())


def test_comparing_needs_exactly_two_runs_of_this_lab(learner):
    _, client = learner
    assert client.get("/course/cache-layers/compare").status_code == 400
    assert client.get("/course/cache-layers/compare?run=nope&run=1").status_code == 400


def test_waiting_runs_are_told_their_place_in_the_fair_order(redis_client):
    lab = lab_get("message-queues")
    now = django_now()
    lab_worker_seen(
        name="w:1", host="w", pid=1, slots=(1, 1), busy=(0, 0), started_at=now
    )
    jobs: list[JobStatus] = []
    for owner in ("user:a", "user:a", "user:b"):
        asked = lab_run_request(
            lab=lab,
            params={"rounds": len(jobs) + 2},  # not identical: no joining
            requester=Requester(visitor=owner, client=""),
            live=False,
        )
        assert asked.job is not None
        jobs.append(asked.job)
    lab_queue_announce(live=False)
    messages = [JobStatus.objects.get(pk=job.id).message for job in jobs]
    # a's first, b's first, then a's second: round robin, not arrival order.
    assert messages == [
        "waiting for a model slot: yours is next",
        "waiting for a model slot: 2 runs ahead of yours (1 at once)",
        "waiting for a model slot: 1 run ahead of yours (1 at once)",
    ]


def test_the_place_text_names_the_wait_once_runs_have_finished_before():
    assert place_text(ahead=3, slots=2, typical_run_s=20.0, live=True) == (
        "waiting for a live slot: 3 runs ahead of yours (2 at once, about 20 s)"
    )
    assert place_text(ahead=1, slots=2, typical_run_s=None, live=True) == (
        "waiting for a live slot: yours is next"
    )
    assert "no lab worker" in place_text(
        ahead=0, slots=0, typical_run_s=None, live=False
    )


# --- the comparison itself (pure) ----------------------------------------------------


def test_params_and_cells_that_moved_are_found():
    rows = params_compared({"a": 1, "b": [1, 2]}, {"a": 2, "b": [1, 2]}, ["a", "b"])
    assert [(row.name, row.differs) for row in rows] == [("a", True), ("b", False)]
    first = {"t": {"columns": ["x", "y"], "rows": [[1, 2], [3, 4]]}}
    second: dict[str, dict[str, Any]] = {
        "t": {"columns": ["x", "y"], "rows": [[1, 5], [3, 4], [6, 7]]},
        "new": {"columns": ["z"], "rows": []},
    }
    pairs = tables_compared(first, second)
    assert [pair.name for pair in pairs] == ["t", "new"]
    assert pairs[0].moved == {(0, 1), (2, 0), (2, 1)}
    assert pairs[1].first is None
    assert pairs[0].second_rows()[0] == [(1, False), (5, True)]


def test_a_chart_of_two_runs_pairs_each_series():
    chart = Chart(table="t", label="layer", values=("share",), title="Share")
    first = {"columns": ["layer", "share"], "rows": [["edge", 10], ["server", 20]]}
    second = {"columns": ["layer", "share"], "rows": [["edge", 30], ["origin", 5]]}
    pair = chart_pair(chart, first, second)
    assert pair is not None
    spec, table = pair
    assert spec["values"] == ["share · A", "share · B"]
    assert table == {
        "columns": ["layer", "share · A", "share · B"],
        "rows": [["edge", 10, 30], ["server", 20, None], ["origin", None, 5]],
    }


def test_a_split_chart_of_two_runs_keeps_each_rows_series():
    chart = Chart(
        table="d", label="consumers", values=("depths",), title="Depth", split=True
    )
    first = {"columns": ["consumers", "depths"], "rows": [[1, "2 4"]]}
    second = {"columns": ["consumers", "depths"], "rows": [[1, "1 1"]]}
    pair = chart_pair(chart, first, second)
    assert pair is not None
    _, table = pair
    assert table["rows"] == [["A 1", "2 4"], ["B 1", "1 1"]]
    assert chart_pair(chart, first, None) is None


def test_an_operator_reads_lab_runs_in_the_admin_and_cannot_change_them(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=False):
        run(Client())
    operator = get_user_model().objects.create_user(
        "op", password="pw-operator-1", is_staff=True
    )
    admin_client = Client()
    admin_client.force_login(operator)
    assert admin_client.get("/admin/course/labrun/").status_code == 403  # no right
    operator.user_permissions.add(Permission.objects.get(codename="view_labrun"))
    page = admin_client.get("/admin/course/labrun/")
    assert page.status_code == 200
    assert "cache-layers" in page.content.decode()
    record = LabRun.objects.get()
    delete = f"/admin/course/labrun/{record.pk}/delete/"
    change = admin_client.post(delete, {"post": "yes"})
    assert change.status_code == 403
    assert LabRun.objects.exists()


# --- a learner's runs are theirs, unless shared by link on purpose --------------------


def finished_run(client: Client, seed: int) -> str:
    # A seed of its own: an identical model run would be reused, not run.
    job_id = run(client, seed=str(seed))
    assert run_waiting() == 1
    return job_id


def test_someone_elses_run_is_not_shown_explained_compared_or_followed(redis_client):
    owner, stranger = Client(), Client()
    mine = finished_run(owner, 1)
    theirs = finished_run(stranger, 2)
    page = stranger.get(f"/course/cache-layers/?job={mine}").content.decode()
    assert "That run could not be found" in page
    assert (
        stranger.get(f"/course/cache-layers/runs/{mine}/explained").status_code == 404
    )
    compared = stranger.get(f"/course/cache-layers/compare?run={mine}&run={theirs}")
    assert compared.status_code == 400
    assert stranger.get(f"/jobs/{mine}/status").status_code == 404
    # The owner, an anonymous visitor known by their session's token, sees it all.
    assert owner.get(f"/jobs/{mine}/status").status_code == 200
    assert owner.get(f"/course/cache-layers/runs/{mine}/explained").status_code == 200
    assert (
        "That run could not be found"
        not in owner.get(f"/course/cache-layers/?job={mine}").content.decode()
    )


def test_a_run_shared_by_its_link_shows_that_run_and_nothing_else(redis_client):
    owner, stranger = Client(), Client()
    mine = finished_run(owner, 1)
    page = owner.get(f"/course/cache-layers/?job={mine}").content.decode()
    link = re.search(r'id="share-url" type="text" readonly value="([^"]+)"', page)
    assert link is not None
    shared = link[1].replace("http://testserver", "").replace("&amp;", "&")
    assert shared.startswith(f"/course/cache-layers/?job={mine}&share=")
    seen = stranger.get(shared).content.decode()
    assert "That run could not be found" not in seen
    assert 'data-table="repetition"' in seen or "<code>repetition</code>" in seen
    assert 'id="share-url"' not in seen  # only the owner hands out the link
    token = shared.rsplit("share=", 1)[1]
    explained = f"/course/cache-layers/runs/{mine}/explained?share={token}"
    assert stranger.get(explained).status_code == 200
    other = finished_run(Client(), 2)
    forged = stranger.get(f"/course/cache-layers/?job={other}&share={token}")
    assert "That run could not be found" in forged.content.decode()

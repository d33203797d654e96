"""The lab service: every learner may run live parts, within quotas; identical runs
are joined or reused; a run whose worker died fails instead of running for ever."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, override_settings
from django.utils import timezone

from course.labs.registry import lab_get
from course.models import LabAllowance, LabRun
from course.policies import RefusalKind, run_fingerprint
from course.services.labqueue import Choice, LabRefused, Requester, lab_run_request
from course.services.labwork import (
    EXPIRED,
    lab_run_take,
    lab_runs_expire,
    lab_runs_hand_back,
)
from course.tests.labwork import run_waiting
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db

RUN = "/course/cache-metrics/run"
JSON = {"accept": "application/json"}


def learner(name: str = "ada") -> tuple[Any, Client]:
    user = get_user_model().objects.create_user(name, password="pw-learner-1")
    client = Client()
    client.force_login(user)
    return user, client


def requester(owner: str) -> Requester:
    return Requester(visitor=owner, client="")


# --- every learner runs the live part; operators may withdraw it --------------------


def test_a_signed_in_learner_queues_a_live_run(redis_client):
    _, client = learner()
    page = client.get("/course/dead-letter-queues/").content.decode()
    assert 'name="live"' in page
    assert 'id="id_live" disabled' not in page
    response = client.post(
        "/course/dead-letter-queues/run", {"live": "on", "messages": "10"}, headers=JSON
    )
    assert response.status_code == 202
    job = JobStatus.objects.get()
    assert job.params["_live"] is True
    assert LabRun.objects.get().live is True


def test_a_value_only_the_model_runs_is_refused_at_request_time(redis_client):
    # The live part says what it cannot run; the form and the service ask it before
    # anything is queued, so the worker never starts a run that cannot finish.
    user, client = learner()
    response = client.post(
        "/course/cache-layers/run",
        {"live": "on", "server_capacity": "0"},
        headers=JSON,
    )
    assert response.status_code == 400
    [message] = response.json()["errors"]["live"]
    assert message.startswith("server_capacity: 0 (server cache off)")
    lab = lab_get("cache-layers")
    with pytest.raises(LabRefused) as refused:
        lab_run_request(
            lab=lab,
            params={"server_capacity": 0},
            requester=Requester(visitor="ada", client="", user=user),
            live=True,
        )
    assert refused.value.refusal.kind is RefusalKind.MODEL_ONLY
    assert str(refused.value) == message
    assert not JobStatus.objects.exists()
    # The model alone runs those values.
    assert (
        client.post(
            "/course/cache-layers/run", {"server_capacity": "0"}, headers=JSON
        ).status_code
        == 202
    )


def test_an_anonymous_visitor_is_invited_to_sign_up_for_the_live_part(client):
    page = client.get("/course/dead-letter-queues/").content.decode()
    assert "needs an account" in page
    assert "/accounts/signup/" in page
    response = client.post(
        "/course/dead-letter-queues/run", {"live": "on"}, headers=JSON
    )
    assert response.status_code == 403
    assert "needs an account" in response.json()["errors"]["live"][0]
    assert (
        client.post("/course/dead-letter-queues/run", {"live": "on"}).status_code == 403
    )
    assert not JobStatus.objects.exists()
    # The model runs without an account.
    assert client.post("/course/dead-letter-queues/run", {}).status_code == 303


def test_an_operator_withdraws_the_live_right_from_one_account(redis_client):
    user, client = learner()
    LabAllowance.objects.create(user=user, live_allowed=False, reason="abuse")
    response = client.post(
        "/course/dead-letter-queues/run", {"live": "on"}, headers=JSON
    )
    assert response.status_code == 403
    assert "withdrawn" in response.json()["errors"]["live"][0]
    _, other = learner("bea")
    assert (
        other.post(
            "/course/dead-letter-queues/run", {"live": "on"}, headers=JSON
        ).status_code
        == 202
    )


def test_an_operator_needs_the_permission_to_change_an_allowance(redis_client):
    user, _ = learner()
    staff = get_user_model().objects.create_user(
        "op", password="pw-operator-1", is_staff=True
    )
    admin = Client()
    admin.force_login(staff)
    assert admin.get("/admin/course/laballowance/add/").status_code == 403
    staff.user_permissions.add(
        Permission.objects.get(codename="add_laballowance"),
        Permission.objects.get(codename="view_laballowance"),
    )
    answer = admin.post(
        "/admin/course/laballowance/add/",
        {"user": user.pk, "live_allowed": "", "reason": "too many runs"},
    )
    assert answer.status_code == 302, answer.content[:500]
    allowance = LabAllowance.objects.get(user=user)
    assert (allowance.live_allowed, allowance.updated_by) == (False, staff)


# --- quotas and their refusals ------------------------------------------------------


def test_a_heavy_run_needs_an_account(client):
    heavy = {"requests": "200000", "capacities": "1,2,3,4,5,6,7,8,9,10,11,12"}
    response = client.post(RUN, heavy, headers=JSON)
    assert response.status_code == 403
    body = response.json()
    assert body["refusal"] == "needs account"
    assert body["signup_url"] == "/accounts/signup/"
    assert "200 default runs" in body["error"]
    assert "Retry-After" not in response
    _, signed_in = learner()
    assert signed_in.post(RUN, heavy, headers=JSON).status_code == 202


@override_settings(LAB_COST_PER_RUN=50)
def test_a_learners_run_past_the_largest_size_is_refused_with_a_reason(redis_client):
    _, client = learner()
    response = client.post(RUN, {"requests": "200000"}, headers=JSON)
    assert response.status_code == 400
    assert "one run may cost at most 50" in response.json()["error"]
    assert not JobStatus.objects.exists()


@override_settings(LAB_ANON_COST_PER_HOUR=3)
def test_fresh_sessions_from_one_address_share_its_hour(redis_client):
    for seed in range(3):
        assert Client().post(RUN, {"seed": str(seed)}, headers=JSON).status_code == 202
    refused = Client().post(RUN, {"seed": "9"}, headers=JSON)
    assert refused.status_code == 429
    assert 3500 < int(refused["Retry-After"]) <= 3600
    assert "an hour allows 3" in refused.json()["error"]


@override_settings(LAB_LIVE_RUNS_PER_HOUR=1)
def test_live_runs_per_hour_are_counted_per_learner(redis_client):
    _, client = learner()
    live = {"live": "on"}
    assert (
        client.post("/course/dead-letter-queues/run", live, headers=JSON).status_code
        == 202
    )
    refused = client.post(
        "/course/delivery-semantics/run", {**live, "messages": "5"}, headers=JSON
    )
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 3000


def test_an_operator_sets_one_learners_quota(redis_client):
    user, client = learner()
    LabAllowance.objects.create(user=user, runs_in_flight=1)
    assert client.post(RUN, {"seed": "1"}, headers=JSON).status_code == 202
    refused = client.post(RUN, {"seed": "2"}, headers=JSON)
    assert refused.status_code == 429
    assert "1 run waiting or running" in refused.json()["error"]


@override_settings(LAB_QUEUE_CAPACITY=2)
def test_a_full_queue_refuses_new_runs_with_retry_after(redis_client):
    for seed in range(2):
        assert Client().post(RUN, {"seed": str(seed)}, headers=JSON).status_code == 202
    refused = Client().post(RUN, {"seed": "7"}, headers=JSON)
    assert refused.status_code == 503
    assert refused["Retry-After"] == "10"
    assert JobStatus.objects.count() == 2
    # Joining a waiting run adds no work, so the full queue lets it through.
    assert Client().post(RUN, {"seed": "0"}, headers=JSON).status_code == 202


# --- single flight ------------------------------------------------------------------


def test_an_identical_waiting_run_is_joined_and_runs_once(redis_client):
    _, ada = learner("ada")
    _, bea = learner("bea")
    first = ada.post(RUN, {"prediction": "40"}, headers=JSON).json()
    second = bea.post(RUN, {"prediction": "55"}, headers=JSON).json()
    assert (first["joined"], second["joined"]) == (False, True)
    assert "joined it" in second["message"]
    assert run_waiting() == 1  # one experiment for both
    mine, theirs = (JobStatus.objects.get(pk=body["job"]) for body in (first, second))
    assert (mine.state, theirs.state) == ("done", "done")
    assert theirs.result == mine.result
    assert theirs.progress == 100.0
    assert theirs.finished_at == mine.finished_at
    # Each keeps their own prediction and their own record.
    assert (mine.params["_prediction"], theirs.params["_prediction"]) == (40, 55)
    assert LabRun.objects.get(pk=theirs.pk).leader_id == mine.pk
    assert LabRun.objects.get(pk=theirs.pk).cost == 0.0
    page = bea.get(f"/course/cache-metrics/?job={theirs.pk}").content.decode()
    assert "shares the result of an identical run" in page


def test_a_joined_run_follows_its_leader_through_failure(redis_client):
    lab = lab_get("cache-metrics")
    leader = lab_run_request(lab=lab, params={}, requester=requester("user:1")).job
    joined = lab_run_request(lab=lab, params={}, requester=requester("user:2")).job
    assert leader is not None
    assert joined is not None
    JobStatus.objects.filter(pk=leader.pk).update(params={"requests": -1})
    run_waiting()
    failed = JobStatus.objects.get(pk=joined.pk)
    assert failed.state == "failed"
    assert failed.error == JobStatus.objects.get(pk=leader.pk).error


def test_a_finished_identical_model_run_is_reused(redis_client):
    _, client = learner()
    first = client.post(RUN, {}, headers=JSON).json()
    run_waiting()
    again = client.post(RUN, {}, headers=JSON)
    assert again.status_code == 202
    body = again.json()
    assert body["reused"] is True
    reused = JobStatus.objects.get(pk=body["job"])
    assert reused.state == "done"
    assert reused.result == JobStatus.objects.get(pk=first["job"]).result
    assert run_waiting() == 0
    fresh = client.post(RUN, {"choice": "fresh"}, headers=JSON).json()
    assert fresh["reused"] is False
    assert run_waiting() == 1


def finished_live_run(slug: str = "delivery-semantics") -> JobStatus:
    lab = lab_get(slug)
    params = lab.validate({})
    job = JobStatus.objects.create(
        kind="lab",
        name=slug,
        params={**params, "_live": True},
        state="done",
        result={
            "lesson": slug,
            "params": params,
            "tables": {"t": {"columns": [], "rows": []}},
        },
        started_at=timezone.now() - datetime.timedelta(seconds=40),
        finished_at=timezone.now() - datetime.timedelta(seconds=30),
    )
    LabRun.objects.create(
        job=job,
        slug=slug,
        visitor="user:999",
        live=True,
        fingerprint=run_fingerprint(slug, params, live=True),
    )
    return job


def test_a_finished_identical_live_run_is_offered_first(redis_client):
    earlier = finished_live_run()
    _, client = learner()
    url = "/course/delivery-semantics/run"
    offered = client.post(url, {"live": "on"}, headers=JSON)
    assert offered.status_code == 200
    assert "finished at" in offered.json()["offer"]["message"]
    assert JobStatus.objects.count() == 1  # nothing written for an offer
    html = client.post(url, {"live": "on"})
    assert "Run my own anyway" in html.content.decode()
    taken = client.post(url, {"live": "on", "choice": "reuse"}, headers=JSON).json()
    assert taken["reused"] is True
    assert JobStatus.objects.get(pk=taken["job"]).result == earlier.result
    own = client.post(url, {"live": "on", "choice": "fresh"}, headers=JSON).json()
    assert JobStatus.objects.get(pk=own["job"]).state == "queued"


@override_settings(LAB_REUSE_S=0)
def test_reuse_can_be_turned_off(redis_client):
    finished_live_run()
    _, client = learner()
    response = client.post(
        "/course/delivery-semantics/run", {"live": "on"}, headers=JSON
    )
    assert response.status_code == 202


def test_the_choice_must_be_one_of_three(redis_client):
    response = Client().post(RUN, {"choice": "steal"}, headers=JSON)
    assert response.status_code == 400
    assert "choice" in response.json()["errors"]
    assert {c.value for c in Choice} == {"auto", "fresh", "reuse"}


# --- a run whose worker died --------------------------------------------------------


def test_a_run_whose_lease_ran_out_fails_with_a_reason_and_so_do_its_joiners(
    redis_client,
):
    lab = lab_get("cache-metrics")
    leader = lab_run_request(lab=lab, params={}, requester=requester("user:1")).job
    joined = lab_run_request(lab=lab, params={}, requester=requester("user:2")).job
    assert leader is not None
    assert joined is not None
    taken = lab_run_take(live=False, owner="dead:1", lease_s=30)
    assert taken is not None
    assert JobStatus.objects.get(pk=joined.pk).state == "running"
    assert lab_runs_expire() == 0  # the lease still holds
    later = timezone.now() + datetime.timedelta(seconds=31)
    assert lab_runs_expire(now=later) == 1
    for job_id in (leader.pk, joined.pk):
        job = JobStatus.objects.get(pk=job_id)
        assert (job.state, job.error) == ("failed", EXPIRED)


def test_a_stopping_worker_hands_its_runs_back(redis_client):
    asked = lab_run_request(
        lab=lab_get("cache-metrics"), params={}, requester=requester("user:1")
    )
    assert lab_run_take(live=False, owner="stopping:1", lease_s=30) is not None
    assert lab_runs_hand_back(owner="stopping:1") == 1
    assert asked.job is not None
    job = JobStatus.objects.get(pk=asked.job.pk)
    assert (job.state, job.lease_owner, job.started_at) == ("queued", "", None)
    assert run_waiting() == 1


# --- Redis away -----------------------------------------------------------------------


def test_a_live_run_asked_for_while_redis_is_away_waits_in_the_queue(
    redis_client, caplog
):
    """The run's queue is the database: Redis only wakes the workers up, so a run
    asked for during an outage is accepted and waits, with no 500 and no traceback.
    (This replaces the issue's "503 and no row": nothing the run needs is missing.)"""
    from config.processes import free_port

    away = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    _, client = learner()
    with override_settings(
        REDIS_URL=away,
        CACHES={
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": away,
            }
        },
    ):
        response = client.post(
            "/course/dead-letter-queues/run",
            {"live": "on", "messages": "10"},
            headers=JSON,
        )
    assert response.status_code == 202, response.content[:300]
    job = JobStatus.objects.get()
    assert job.state == JobStatus.State.QUEUED
    assert LabRun.objects.get(job=job).live is True
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@pytest.mark.django_db(transaction=True)
def test_two_identical_requests_at_the_same_moment_make_one_run(
    redis_client, monkeypatch
):
    """The second request waits on the first one's LabFlight row, then joins its
    run; without the row both would find nothing in flight and queue two runs.

    The first request is held inside its transaction (in the look-up for a run to
    join) until the second is seen waiting on a lock: PostgreSQL names the wait in
    pg_stat_activity; SQLite's IMMEDIATE transactions never let the second start."""
    import threading

    from django.db import connection, connections

    from config.processes import wait_until
    from course.selectors import lab_same_in_flight
    from course.services import labqueue

    lab = lab_get("cache-metrics")
    inside, release = threading.Event(), threading.Event()
    real = lab_same_in_flight
    answers: dict[str, Any] = {}

    def held(*, fingerprint: str) -> JobStatus | None:
        if threading.current_thread().name == "first":
            inside.set()
            release.wait(timeout=60)
        return real(fingerprint=fingerprint)

    def ask(name: str) -> None:
        try:
            answers[name] = lab_run_request(
                lab=lab, params=lab.defaults(), requester=requester(name)
            )
        finally:
            connections.close_all()

    monkeypatch.setattr(labqueue, "lab_same_in_flight", held)
    try:
        first = threading.Thread(target=ask, args=("first",), name="first")
        first.start()
        assert inside.wait(timeout=60)
        second = threading.Thread(target=ask, args=("second",), name="second")
        second.start()
        if connection.vendor == "postgresql":
            wait_until(
                lambda: _waiting_on_a_lock(connection),
                "the second request to wait on the first's row",
            )
        release.set()
        first.join(timeout=60)
        second.join(timeout=60)
    finally:
        release.set()
    assert answers["first"].leader is None
    assert answers["second"].leader is not None
    assert answers["second"].leader.pk == answers["first"].job.pk
    assert LabRun.objects.filter(leader__isnull=True).count() == 1


def _waiting_on_a_lock(connection) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool(cursor.fetchone()[0])

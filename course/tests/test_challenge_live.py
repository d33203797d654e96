"""A solved challenge checked on the live system: the pure verdict, what
lesson_check proves of every lesson's live conditions, the page's block and its
form through the lab service, and one real live run in its sandbox."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from course.challenges import problems as problems_module
from course.challenges.expr import Context
from course.challenges.grading import challenge_live_params, live_fingerprint
from course.challenges.live import live_context, live_verdict, run_tables
from course.challenges.problems import challenge_problems
from course.challenges.recorded import recordings_of
from course.challenges.spec import (
    LIVE_PREFIX,
    Challenge,
    challenge_read,
    lesson_challenges,
)
from course.labs.harness.base import Tables, table
from course.labs.registry import lab_get
from course.lessons import LESSONS
from course.models import ChallengeProgress, LabAllowance, LabRun
from course.tests.labwork import run_waiting
from course.textbook import lesson_text, model_tables
from jobs.models import JobStatus

JSON = {"accept": "application/json"}
SLUG = "cache-strategies"
CID = "half-the-writes"
URL = f"/course/{SLUG}/challenges/{CID}"
LIVE_URL = f"{URL}/live"
PAGE = f"/course/{SLUG}/"
LIVE_CHECKED = [
    (c.slug, c.id)
    for lesson in LESSONS
    for c in lesson_challenges(lesson.slug)
    if c.live_checked
]


def challenge_of(slug: str, cid: str) -> Challenge:
    return next(c for c in lesson_challenges(slug) if c.id == cid)


# --- the verdict, pure ---------------------------------------------------------------


RAW: dict[str, Any] = {
    "id": "made-up",
    "title": "Made up",
    "goal": "Write less.",
    "kind": "params",
    "change": ["flush_every"],
    "require": ["strategies[write-behind].origin_writes <= 100"],
    "solution": {"flush_every": 19},
    "wrong": {"flush_every": 2},
    "hints": ["One.", "Two."],
    "debrief": "Because.",
    "live": [
        "live_w[a].writes * 2 <= live_w[b].writes",
        "live_w[a].pending <= 5",
    ],
    "live_explain": "Measured {{live_w[a].writes}} writes.",
}


def made_up(**changes: Any) -> Challenge:
    return challenge_read(SLUG, {**RAW, **changes}, 1)


def tables_of(writes_a: int, writes_b: int, pending: int | None) -> dict[str, Any]:
    return {
        "live_w": {
            "columns": ["name", "writes", "pending"],
            "rows": [["a", writes_a, pending], ["b", writes_b, 0]],
        }
    }


def test_a_run_that_meets_every_live_condition_is_confirmed():
    verdict = live_verdict(made_up(), Context({}, tables_of(86, 175, 4)))
    assert verdict.confirmed
    assert verdict.held == 2
    assert verdict.headline.startswith("Confirmed on the live system")
    assert [c.held for c in verdict.conditions] == [True, True]


def test_a_condition_that_fails_is_said_with_the_measured_figure():
    verdict = live_verdict(made_up(), Context({}, tables_of(86, 175, 10)))
    assert not verdict.confirmed
    assert verdict.headline == "Not confirmed: 1 of 2 live conditions held on this run."
    missed = verdict.conditions[1]
    assert not missed.held
    assert missed.said == "live_w[a].pending is 10; the goal needs it ≤ 5"
    assert verdict.conditions[0].held


def test_an_empty_cell_or_a_missing_table_is_a_miss_not_an_error():
    empty = live_verdict(made_up(), Context({}, tables_of(86, 175, None)))
    assert [c.held for c in empty.conditions] == [True, False]
    assert "empty" in empty.conditions[1].said
    gone = live_verdict(made_up(), Context({}, {}))
    assert not gone.confirmed
    assert "no table 'live_w'" in gone.conditions[0].said


def test_a_cell_at_other_settings_is_the_models_figure():
    lab = lab_get("cache-layers")
    params = lab.resolve({"edge_capacity": "20"})
    challenge = challenge_read(
        "cache-layers",
        {
            **RAW,
            "change": ["edge_capacity"],
            "require": ["chain[edge].requests >= 1"],
            "solution": {"edge_capacity": 24},
            "wrong": {"edge_capacity": 20},
            "live": [
                "live_chain[edge].requests >= chain[edge].requests@edge_capacity=99"
            ],
            "live_explain": "",
        },
        1,
    )
    unbounded = model_tables(lab, lab.resolve({"edge_capacity": "99"}))
    target = unbounded["chain"]["rows"][1][1]
    assert isinstance(target, int)
    asked = []

    def runner(p: dict[str, Any]) -> Any:
        asked.append(p["edge_capacity"])
        return model_tables(lab, p)

    for measured, held in ((target, True), (target - 1, False)):
        run: Tables = {"live_chain": table(["layer", "requests"], [["edge", measured]])}
        context = live_context(lab, params, run, runner)
        assert live_verdict(challenge, context).confirmed is held
    assert set(asked) == {99}  # the model at the changed setting, never the run


def test_a_runs_tables_are_read_from_its_stored_result():
    assert run_tables({"tables": {"t": {"columns": [], "rows": []}}}) == {
        "t": {"columns": [], "rows": []}
    }
    assert run_tables(None) == {}
    assert run_tables({"tables": "nope"}) == {}


NUMBER = {
    **{k: v for k, v in RAW.items() if k not in ("change", "require", "solution")},
    "kind": "number",
    "value": "strategies[cache-aside].hits",
    "answer": 1,
    "wrong": 2,
}


@pytest.mark.parametrize(
    ("raw", "reported"),
    [
        ({**RAW, "live": ["live_w[a].writes <="]}, "live 1: 'live_w[a].writes <='"),
        ({**RAW, "live": ["strategies[x].hits > 1"]}, "names no live_… table"),
        ({**RAW, "live": [], "live_explain": "Hm."}, "live_explain without live"),
        (NUMBER, 'live is for kind = "params"'),
    ],
)
def test_a_live_entry_that_does_not_follow_the_format_is_reported(raw, reported):
    challenge = challenge_read(SLUG, raw, 1)
    assert not challenge.usable
    assert any(reported in p for p in challenge.problems), challenge.problems


def _raw_of(challenge: Challenge) -> dict[str, Any]:
    return {
        "id": challenge.id,
        "title": challenge.title,
        "goal": challenge.goal,
        "kind": challenge.kind,
        "change": list(challenge.change),
        "require": [c.source for c in challenge.require],
        "solution": dict(challenge.solution),
        "wrong": dict(challenge.wrong),
        "hints": list(challenge.hints),
        "debrief": challenge.debrief,
        "live": [c.source for c in challenge.live],
        "live_explain": challenge.live_explain,
    }


# --- every lesson's live conditions, proven on the recorded runs ----------------------


def test_the_lessons_whose_live_part_measures_a_goal_have_a_live_check():
    assert {slug for slug, _ in LIVE_CHECKED} == {
        "backpressure",
        "cache-layers",
        "cache-metrics",
        "cache-strategies",
        "delivery-semantics",
        "long-running-jobs",
        "server-sent-events",
        "streaming-responses",
        "streams-vs-queues",
    }


@pytest.mark.parametrize(("slug", "cid"), LIVE_CHECKED)
def test_the_live_conditions_parse_and_name_what_a_real_live_run_produced(slug, cid):
    challenge = challenge_of(slug, cid)
    assert challenge.usable, challenge.problems
    recording = recordings_of(slug)[cid]
    tables = recording.solution.tables
    for condition in challenge.live:
        live_cells = [c for c in condition.cells if c.table.startswith(LIVE_PREFIX)]
        assert live_cells, condition.source
        for cell in live_cells:
            assert cell.table in tables, (condition.source, sorted(tables))
            assert cell.column in tables[cell.table]["columns"], condition.source
    # Rows, parameters, and the verdicts: the solution's run holds, the wrong fails.
    assert problems_module._live_proof(challenge, lab_get(slug)) == []


def test_lesson_check_reports_live_conditions_its_recorded_runs_do_not_bear_out(
    monkeypatch,
):
    real = challenge_of(SLUG, CID)
    raw = _raw_of(real)
    raw["search"] = {"flush_every": [1, 40]}
    raw["maximise"] = "flush_every"

    def check(**changes: Any) -> list[str]:
        challenge = challenge_read(SLUG, {**raw, **changes}, 1)
        monkeypatch.setattr(
            problems_module, "lesson_challenges", lambda slug: (challenge,)
        )
        return challenge_problems(SLUG, lesson_text(SLUG))

    found = check(live=["live_strategies[write-behind].nowhere > 0"])
    assert any("has no column 'nowhere'" in p for p in found), found
    found = check(live=["live_strategies[write-behind].origin_writes > 1000"])
    assert any("recorded run of the solution misses" in p for p in found), found
    found = check(live=["live_strategies[write-behind].origin_writes > 0"])
    assert any("wrong answer meets every live condition" in p for p in found), found
    found = check(id="not-recorded")
    assert any("no recorded live run" in p for p in found), found
    found = check(solution={"flush_every": 18})
    assert any("its parameters are not the answer's" in p for p in found), found


# --- the page and the form -----------------------------------------------------------


@pytest.fixture
def learner(db):
    user = get_user_model().objects.create_user("learner", password="pw-learner-1")
    client = Client()
    client.force_login(user)
    return user, client


def solve(client: Client) -> None:
    answer = challenge_of(SLUG, CID).solution
    assert client.post(URL, answer, headers=JSON).json()["solved"] is True


def block_of(page: str) -> str:
    start = page.index(f'id="challenge-{CID}-live"')
    return page[start : page.index("</div>\n</div>", start)]


@pytest.mark.django_db
def test_a_visitor_is_invited_to_sign_up_and_cannot_ask_for_a_live_run(client):
    page = client.get(PAGE).content.decode()
    block = block_of(page)
    assert "Sign up" in block
    assert 'name="action" value="live"' not in block
    refused = client.post(URL, {"action": "live"}, headers=JSON)
    assert refused.status_code == 403
    assert "needs an account" in refused.json()["error"]
    assert not JobStatus.objects.exists()


def test_the_button_appears_once_the_model_accepted_the_answer(learner):
    _, client = learner
    before = block_of(client.get(PAGE).content.decode())
    assert "Check it on the live system" not in before
    assert "Once the model accepts your answer" in before
    refused = client.post(URL, {"action": "live"}, headers=JSON)
    assert refused.status_code == 400
    assert "Solve the challenge with the model first" in refused.json()["error"]
    solve(client)
    after = block_of(client.get(PAGE).content.decode())
    assert "Check it on the live system" in after
    assert "<code>flush_every=19</code>" in after


def test_the_solving_answer_brings_the_button_without_a_reload(learner):
    _, client = learner
    wrong = challenge_of(SLUG, CID).wrong
    assert client.post(URL, wrong, headers=JSON).json()["live_html"] == ""
    answer = client.post(URL, challenge_of(SLUG, CID).solution, headers=JSON).json()
    assert "Check it on the live system" in answer["live_html"]
    assert "<code>flush_every=19</code>" in answer["live_html"]


def test_a_learner_whose_live_right_was_withdrawn_gets_no_button(learner):
    user, client = learner
    solve(client)
    LabAllowance.objects.create(user=user, live_allowed=False)
    block = block_of(client.get(PAGE).content.decode())
    assert "Check it on the live system" not in block
    assert "withdrawn" in block
    assert client.post(URL, {"action": "live"}, headers=JSON).status_code == 403
    assert not JobStatus.objects.exists()


def test_the_form_asks_the_lab_service_for_a_live_run_of_the_solved_answer(learner):
    user, client = learner
    solve(client)
    # What the form sends besides the action is ignored: the answer is the solved one.
    response = client.post(URL, {"action": "live", "flush_every": "2"}, headers=JSON)
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["pending"] is True
    assert "Your live run of this answer" in body["html"]
    job = JobStatus.objects.get()
    lab = lab_get(SLUG)
    expected = lab.resolve({"flush_every": "19"})
    assert job.params == {**expected, "_live": True}
    assert job.state == JobStatus.State.QUEUED
    run = LabRun.objects.get(job=job)
    assert run.live is True
    assert run.visitor == f"user:{user.pk}"
    assert run.fingerprint == live_fingerprint(challenge_of(SLUG, CID), expected)
    # The page and the JSON it reads say the run is waiting, and offer no second one.
    block = block_of(client.get(PAGE).content.decode())
    assert "Your live run of this answer" in block
    assert ">queued</span>" in block
    assert "Check it on the live system" not in block
    polled = client.get(LIVE_URL).json()
    assert polled["pending"] is True
    assert polled["state"] == "queued"
    # The lab service's own rules apply: a second identical run joins the first.
    again = client.post(URL, {"action": "live"}, headers=JSON)
    assert again.status_code == 202
    assert (
        LabRun.objects.get(job__in=JobStatus.objects.exclude(pk=job.pk)).leader_id
        == job.pk
    )


def test_without_javascript_the_form_goes_back_to_the_challenge(learner):
    _, client = learner
    solve(client)
    response = client.post(URL, {"action": "live"})
    assert response.status_code == 303
    assert response["Location"] == f"{PAGE}#challenge-{CID}"
    assert JobStatus.objects.filter(params___live=True).count() == 1


def test_the_lab_services_quotas_apply_to_a_live_check(learner, settings):
    _, client = learner
    solve(client)
    settings.LAB_RUNS_PER_VISITOR = 1
    assert client.post(URL, {"action": "live"}, headers=JSON).status_code == 202
    # The run still waits: a learner's runs in flight are bounded, live checks too.
    refused = client.post(URL, {"action": "live", "choice": "fresh"}, headers=JSON)
    assert refused.status_code == 429
    assert refused["Retry-After"]
    assert "waiting or running" in refused.json()["error"]
    assert JobStatus.objects.count() == 1
    # Without JavaScript the reason is shown in the challenge's live block.
    page = client.post(URL, {"action": "live", "choice": "fresh"})
    assert page.status_code == 429
    block = block_of(page.content.decode())
    assert "alert-error" in block
    assert refused.json()["error"] in block


def finished_run(user_id: int, tables: dict[str, Any], **job: Any) -> JobStatus:
    """Write a finished live run of the solved answer, as a lab worker leaves it."""
    lab = lab_get(SLUG)
    params = challenge_live_params(challenge_of(SLUG, CID), {"flush_every": "19"})
    now = timezone.now()
    made = JobStatus.objects.create(
        kind="lab",
        name=SLUG,
        params={**params, "_live": True},
        state=job.get("state", JobStatus.State.DONE),
        progress=100.0,
        result={"lesson": SLUG, "params": params, "tables": tables},
        error=job.get("error", ""),
        started_at=now - datetime.timedelta(seconds=5),
        finished_at=now,
    )
    LabRun.objects.create(
        job=made,
        slug=SLUG,
        visitor=f"user:{user_id}",
        live=True,
        fingerprint=live_fingerprint(challenge_of(SLUG, CID), params),
    )
    assert lab.slug == SLUG
    return made


def recorded_tables(which: str) -> dict[str, Any]:
    recording = recordings_of(SLUG)[CID]
    run = recording.solution if which == "solution" else recording.wrong
    lab = lab_get(SLUG)
    return {**model_tables(lab, lab.validate(run.params)), **run.tables}


def test_a_finished_run_shows_its_verdict_and_confirms_the_challenge(learner):
    user, client = learner
    solve(client)
    tables = recorded_tables("solution")
    job = finished_run(user.pk, tables)
    writes = {row[0]: row[2] for row in tables["live_strategies"]["rows"]}
    block = block_of(client.get(PAGE).content.decode())
    assert "Confirmed on the live system: every live condition held." in block
    assert (
        f"live_strategies[write-behind].origin_writes * 2 is "
        f"{writes['write-behind'] * 2}" in block
    )
    assert f"?job={job.id}#lab-results" in block
    assert "confirmed live" in block
    assert "Check it on the live system again" in block
    row = ChallengeProgress.objects.get(user=user, challenge=CID)
    assert row.live_confirmed_at is not None
    assert row.live_run == job.id
    account = client.get("/account/").content.decode()
    assert "1 confirmed live" in account
    polled = client.get(LIVE_URL).json()
    assert polled["pending"] is False
    assert polled["verdict"]["confirmed"] is True
    assert polled["verdict"]["job"] == str(job.id)


def test_a_run_that_misses_is_shown_and_changes_nothing_recorded(learner):
    user, client = learner
    solve(client)
    tables = recorded_tables("solution")
    rows = tables["live_strategies"]["rows"]
    for row in rows:
        if row[0] == "write-behind":
            row[2] = 100  # more than half of write-through's writes
    finished_run(user.pk, tables)
    block = block_of(client.get(PAGE).content.decode())
    assert "Not confirmed: 0 of 1 live condition held on this run." in block
    assert "live_strategies[write-behind].origin_writes * 2 is 200" in block
    row = ChallengeProgress.objects.get(user=user, challenge=CID)
    assert row.live_confirmed_at is None
    assert row.solved_at is not None  # solving stays the model's word


def test_a_failed_run_says_so_and_offers_another(learner):
    user, client = learner
    solve(client)
    finished_run(
        user.pk, {}, state=JobStatus.State.FAILED, error="the sandbox ran out of time"
    )
    block = block_of(client.get(PAGE).content.decode())
    assert "ended as failed: the sandbox ran out of time" in block
    assert "Check it on the live system again" in block


def test_an_identical_run_that_finished_lately_is_offered(learner, settings):
    user, client = learner
    solve(client)
    other = get_user_model().objects.create_user("other", password="pw-other-1")
    job = finished_run(other.pk, recorded_tables("solution"))
    offered = client.post(URL, {"action": "live"}, headers=JSON)
    assert offered.status_code == 200
    assert "finished at" in offered.json()["html"]
    assert "Use that run" in offered.json()["html"]
    reused = client.post(URL, {"action": "live", "choice": "reuse"}, headers=JSON)
    assert reused.status_code == 202
    assert "Confirmed on the live system" in reused.json()["html"]
    mine = LabRun.objects.get(visitor=f"user:{user.pk}")
    assert mine.leader_id == job.id


# --- a real live run, in its sandbox -------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_real_live_run_of_the_solved_answer_confirms_it(redis_client):
    user = get_user_model().objects.create_user("learner", password="pw-learner-1")
    client = Client()
    client.force_login(user)
    solve(client)
    assert client.post(URL, {"action": "live"}, headers=JSON).status_code == 202

    assert run_waiting(live=True) == 1

    job = JobStatus.objects.get()
    assert job.state == JobStatus.State.DONE, job.error
    assert "live_strategies" in run_tables(job.result)
    polled = client.get(LIVE_URL).json()
    assert polled["pending"] is False
    assert polled["verdict"]["confirmed"] is True, polled["verdict"]
    block = block_of(client.get(PAGE).content.decode())
    assert "Confirmed on the live system" in block
    assert ChallengeProgress.objects.get(user=user).live_confirmed_at is not None

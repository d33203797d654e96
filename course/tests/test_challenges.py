"""Graded challenges (#28): the checkers, what lesson_check proves, the endpoint, and
the progress they add to a learner's lesson, index and account pages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from course.challenges import problems as problems_module
from course.challenges.checker import (
    AnswerError,
    Best,
    challenge_params,
    number_parse,
    number_verdict,
    params_verdict,
    run_context,
    search_best,
)
from course.challenges.expr import (
    Context,
    ExprError,
    NoValue,
    describe,
    evaluate,
    parse,
)
from course.challenges.grading import challenge_best, challenge_check
from course.challenges.problems import challenge_problems
from course.challenges.services import challenges_adopt
from course.challenges.spec import Challenge, challenge_read, lesson_challenges
from course.labs.harness.base import (
    Lab,
    LabParams,
    LivePart,
    Param,
    Params,
    Tables,
    accepts_all,
    table,
)
from course.lessons import LESSONS
from course.models import ChallengeProgress
from course.textbook import lesson_text
from course.visitors import PROGRESS_KEY

JSON = {"accept": "application/json"}
PASSWORD = "a-long-pass-phrase-1"
ALL = [(c.slug, c.id) for lesson in LESSONS for c in lesson_challenges(lesson.slug)]
# The lesson the endpoint tests use, and how many challenges it has.
N = len(lesson_challenges("cache-layers"))


def challenge_of(slug: str, cid: str) -> Challenge:
    return next(c for c in lesson_challenges(slug) if c.id == cid)


# --- every challenge of every lesson -------------------------------------------------


def test_every_lesson_has_at_least_two_usable_challenges():
    for lesson in LESSONS:
        found = lesson_challenges(lesson.slug)
        assert len(found) >= 2, lesson.slug
        assert all(c.usable for c in found), [c.problems for c in found]
    assert len(ALL) >= 50
    assert len(set(ALL)) == len(ALL)


@pytest.mark.parametrize(("slug", "cid"), ALL)
def test_the_checker_accepts_the_reference_answer_and_refuses_the_wrong_one(slug, cid):
    challenge = challenge_of(slug, cid)
    if challenge.kind == "number":
        right = challenge_check(challenge, {"answer": repr(challenge.answer)})
        wrong = challenge_check(challenge, {"answer": repr(challenge.wrong_answer)})
    else:
        right = challenge_check(challenge, challenge.solution)
        wrong = challenge_check(challenge, challenge.wrong)
    assert right.solved, (right.headline, right.details)
    assert not wrong.solved
    assert wrong.headline.startswith(("Not yet", "Your choice reaches the goal"))
    if challenge.direction:
        best = challenge_best(challenge)
        assert best is not None
        # The reference answer is the best the search found, not merely a good one.
        assert challenge_check(challenge, dict(best.choice)).solved


@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_lesson_check_proves_every_challenge_of_the_lesson(slug):
    assert challenge_problems(slug, lesson_text(slug)) == []


def test_a_wrong_parameter_answer_is_explained_with_the_models_figures():
    challenge = challenge_of("cache-layers", "edge-big-enough")
    verdict = challenge_check(challenge, {"edge_capacity": "20"})
    assert not verdict.solved
    assert "edge_capacity=20" in verdict.headline
    first = verdict.details[0]
    # What the learner's run produced, and what the goal needed.
    assert re.match(r"chain\[edge\]\.requests is [\d,]+; the goal needs it ≥ ", first)
    assert "With your edge the chain's edge row answers" in verdict.details[1]


def test_a_choice_that_reaches_a_minimise_goal_but_is_not_the_least_is_refused():
    challenge = challenge_of("cache-layers", "edge-big-enough")
    verdict = challenge_check(challenge, {"edge_capacity": "30"})
    assert not verdict.solved
    assert (
        verdict.headline == "Your choice reaches the goal, but it is not the best one."
    )
    assert "lower" in verdict.details[0]


def test_a_number_within_the_tolerance_counts_and_one_outside_does_not():
    challenge = challenge_of("backpressure", "tail-drop-wait")  # within 2 %
    assert challenge_check(challenge, {"answer": "3,333"}).solved
    assert challenge_check(challenge, {"answer": "3300"}).solved
    missed = challenge_check(challenge, {"answer": "3200"})
    assert not missed.solved
    assert missed.headline == "Not yet: 3,200 ms is too low."


# --- the pure parts, with a lab of the tests' own ------------------------------------


@dataclass(frozen=True)
class FakeParams(LabParams):
    n: int
    sizes: list[int]
    mode: str


def _model(params: FakeParams, _progress: Any) -> Tables:
    n, sizes = params.n, params.sizes
    return {
        "t": table(["row", "double", "square"], [["x", 2 * n, n * n], ["y", 1, None]]),
        "s": table(["size", "left"], [[size, 10 - size] for size in sizes]),
    }


def _measure(params: FakeParams, progress: Any) -> None:
    raise AssertionError("the tests' lab has nothing live to measure")


FAKE = Lab(
    slug="fake",
    title="A lab of the tests",
    params=(
        Param("n", "int", 1, minimum=0, maximum=50),
        Param("sizes", "int_list", [1, 2], minimum=0, maximum=100),
        Param("mode", "str", "a"),
    ),
    params_type=FakeParams,
    model=_model,
    live=LivePart(check=accepts_all, measure=_measure, tables=lambda p, m: {}),
)
RUNS: list[Params] = []


def runner(params: Params) -> Tables:
    RUNS.append(dict(params))
    return _model(FAKE.typed(FAKE.validate(params)), None)


def fake(**raw: Any) -> Challenge:
    base: dict[str, Any] = {
        "id": "fake-one",
        "title": "A fake",
        "goal": "Reach it.",
        "kind": "params",
        "change": ["n"],
        "require": ["t[x].square >= 9"],
        "solution": {"n": 3},
        "wrong": {"n": 2},
        "hints": ["One.", "Two."],
        "debrief": "Because.",
    }
    return challenge_read("cache-layers", {**base, **raw}, 1)


def test_an_expression_reads_cells_parameters_and_reruns():
    context = run_context(FAKE, FAKE.resolve({"n": "4"}), runner)
    assert evaluate(parse("t[x].double + n"), context) == 12
    assert evaluate(parse("t[#0].square == 16 and sizes[1] == 2"), context) is True
    assert evaluate(parse("s[#-1].left"), context) == 8
    assert evaluate(parse("t[x].square@n=5 - t[x].square"), context) == 9
    assert evaluate(parse('mode == "a"'), context) is True
    assert evaluate(parse('int("2028-02-29"[8:10])'), context) == 29
    assert evaluate(parse("max(sizes) + len(sizes)"), context) == 4
    with pytest.raises(NoValue):
        evaluate(parse("t[y].square > 0"), context)
    with pytest.raises(ExprError, match="no table 'nope'"):
        evaluate(parse("nope[x].a > 0"), context)
    with pytest.raises(ExprError, match="no row 'z'"):
        evaluate(parse("t[z].double > 0"), context)
    with pytest.raises(ExprError, match="no column 'cube'"):
        evaluate(parse("t[x].cube > 0"), context)
    with pytest.raises(ExprError, match="no parameter 'm'"):
        evaluate(parse("m > 0"), context)


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os')",
        "n.__class__",
        "open('x')",
        "(lambda: 1)()",
        "[x for x in sizes]",
        "n ** 2",
        "",
        "t[x].double >",
    ],
)
def test_an_expression_allows_nothing_beyond_its_language(source):
    with pytest.raises(ExprError):
        parse(source)


def test_a_condition_is_described_with_its_values_and_its_goal():
    typed = FakeParams(n=2, sizes=[1], mode="a")
    context = Context({"n": 2}, _model(typed, None))
    assert (
        describe(parse("t[x].square >= 9"), context)
        == "t[x].square is 4; the goal needs it ≥ 9"
    )
    assert describe(parse("t[x].square >= t[x].double * 3"), context) == (
        "t[x].square is 4; the goal needs it ≥ 12 (t[x].double * 3)"
    )


def test_params_verdict_runs_the_model_and_says_why_it_misses():
    challenge = fake(explain="Square: {{t[x].square}}.")
    assert challenge.usable
    missed = params_verdict(
        challenge, FAKE, FAKE.resolve({"n": "2"}), runner, lambda: None
    )
    assert not missed.solved
    assert missed.answer == {"n": "2"}
    assert missed.details == ("t[x].square is 4; the goal needs it ≥ 9",)
    solved = params_verdict(
        challenge, FAKE, FAKE.resolve({"n": "3"}), runner, lambda: None
    )
    assert solved.solved


def test_the_best_of_a_search_is_found_and_nothing_worse_passes():
    challenge = fake(minimise="n", search={"n": [0, 10]})
    best = search_best(challenge, FAKE, runner)
    assert best == Best(3.0, {"n": "3"})
    worse = params_verdict(
        challenge, FAKE, FAKE.resolve({"n": "5"}), runner, lambda: best
    )
    assert not worse.solved
    assert "not the best" in worse.headline
    maximise = fake(maximise="n", require=["t[x].square <= 30"], search={"n": [0, 10]})
    assert search_best(maximise, FAKE, runner) == Best(5.0, {"n": "5"})


def test_a_search_skips_choices_its_parameter_conditions_rule_out_without_a_run():
    challenge = fake(
        change=["n", "sizes"],
        require=["len(sizes) == 1 and sizes[0] == n", "t[x].square >= 4"],
        minimise="n",
        search={"n": [0, 4], "sizes": [0, 4]},
        solution={"n": 2, "sizes": [2]},
        wrong={"n": 1, "sizes": [1]},
    )
    RUNS.clear()
    assert search_best(challenge, FAKE, runner) == Best(2.0, {"n": "2", "sizes": "2"})
    assert len(RUNS) == 5  # one run per matching pair, not 25


def test_a_params_answer_names_only_what_the_challenge_lets_change():
    challenge = fake(set={"mode": "b"})
    params = challenge_params(challenge, FAKE, {"n": "3", "answer": "ignored"})
    assert params["n"] == 3
    assert params["mode"] == "b"
    with pytest.raises(AnswerError, match="sizes stays as it is"):
        challenge_params(challenge, FAKE, {"n": "3", "sizes": "4"})
    with pytest.raises(AnswerError, match="give a value for n"):
        challenge_params(challenge, FAKE, {"n": " "})
    with pytest.raises(AnswerError, match="at most 50"):
        challenge_params(challenge, FAKE, {"n": "51"})
    with pytest.raises(AnswerError, match="not a whole number"):
        challenge_params(challenge, FAKE, {"n": "three"})


def test_a_number_is_parsed_as_a_learner_writes_it_and_compared_within_tolerance():
    assert number_parse("1,200") == 1200
    assert number_parse(" 8.5 % ") == 8.5
    for bad in ("", "twelve", "nan", "inf", "1e400"):
        with pytest.raises(AnswerError):
            number_parse(bad)
    exact = challenge_read(
        "cache-layers",
        {
            "id": "n",
            "title": "N",
            "goal": "G",
            "kind": "number",
            "value": "t[x].square",
            "answer": 9,
            "wrong": 8,
            "tolerance_pct": 5,
            "unit": "keys",
            "hints": ["a", "b"],
        },
        1,
    )
    assert number_verdict(exact, 9.4, 9.0).solved
    missed = number_verdict(exact, 9.5, 9.0, explain="Because.")
    assert not missed.solved
    assert missed.headline == "Not yet: 9.5 keys is too high."
    assert missed.details == ("Because.",)


def test_an_entry_that_does_not_follow_the_format_keeps_its_problems():
    broken = challenge_read(
        "cache-layers",
        {"id": "Bad Id", "kind": "guess", "hints": ["only one"], "minimise": "n"},
        3,
    )
    assert not broken.usable
    text = " ".join(broken.problems)
    for expected in (
        "id 'Bad Id'",
        "kind 'guess'",
        "no title",
        "no goal",
        "1 hints",
        "change names no parameter",
        "no solution",
        "no wrong",
        "minimise/maximise needs search",
    ):
        assert expected in text, expected
    number = challenge_read(
        "cache-layers",
        {"id": "num", "kind": "number", "change": ["x"], "hints": ["a", "b"]},
        1,
    )
    assert "no value" in " ".join(number.problems)
    assert 'change is for kind = "params"' in " ".join(number.problems)


# --- what lesson_check refuses -------------------------------------------------------


def check_only(monkeypatch, *challenges: Challenge) -> list[str]:
    monkeypatch.setattr(problems_module, "lesson_challenges", lambda slug: challenges)
    return challenge_problems("cache-layers", lesson_text("cache-layers"))


GOOD = {
    "id": "edge-good",
    "title": "Edge",
    "goal": "Make the edge answer at least 300 requests.",
    "kind": "params",
    "change": ["edge_capacity"],
    "require": ["chain[edge].requests >= 300"],
    "solution": {"edge_capacity": 24},
    "wrong": {"edge_capacity": 5},
    "hints": ["One.", "Two."],
    "debrief": "Because.",
}


def entry(**changes: Any) -> Challenge:
    return challenge_read("cache-layers", {**GOOD, **changes}, 1)


def test_lesson_check_accepts_a_sound_pair_of_challenges(monkeypatch):
    other = entry(id="edge-other")
    assert check_only(monkeypatch, entry(), other) == []


@pytest.mark.parametrize(
    ("changes", "reported"),
    [
        ({"wrong": {"edge_capacity": 30}}, "the wrong answer passes"),
        ({"solution": {"edge_capacity": 2}}, "the solution fails"),
        ({"require": ["chain[edge].requests >= 10"]}, "the form as it opens"),
        ({"require": ["chain[nowhere].requests >= 300"]}, "has no row 'nowhere'"),
        ({"change": ["edge_capacity", "users"]}, "solution must give exactly"),
        ({"set": {"colour": 3}}, "set names 'colour', not a parameter"),
        ({"goal": "Beat the origin's 53 requests."}, "goal prints the lesson's"),
        ({"hints": ["The origin answers 53.", "Two."]}, "hint 1 prints"),
        ({"lessons": ["no-such-lesson"]}, "not a lesson"),
        ({"debrief": ""}, "no debrief"),
        ({"goal": "See {{chain[nowhere].requests}}."}, "goal: {{chain[nowhere]"),
        (
            {"minimise": "edge_capacity", "search": {"edge_capacity": [0, 500]}},
            "search covers 501 runs",
        ),
        (
            {"minimise": "edge_capacity", "search": {"edge_capacity": [0, 3]}},
            "no choice of the search reaches the goal",
        ),
    ],
)
def test_lesson_check_reports_a_challenge_that_proves_nothing(
    monkeypatch, changes, reported
):
    found = check_only(monkeypatch, entry(**changes), entry(id="edge-other"))
    assert any(reported in problem for problem in found), found


def test_lesson_check_refuses_a_number_read_off_the_page_or_given_away(monkeypatch):
    number = {
        "id": "origin-count",
        "title": "Origin",
        "kind": "number",
        "goal": "How many requests reach the origin?",
        "value": "chain[server].requests",
        "answer": 260,
        "wrong": 200,
        "hints": ["One.", "Two."],
        "debrief": "Because.",
    }
    found = check_only(
        monkeypatch,
        challenge_read("cache-layers", number, 1),
        challenge_read(
            "cache-layers",
            {
                **number,
                "id": "given",
                "goal": "Is it 260?",
                "value": "0 + chain[server].requests",
            },
            2,
        ),
        challenge_read("cache-layers", {**number, "id": "off", "wrong": 260}, 3),
    )
    assert any("a cell of the lesson's own run" in p for p in found), found
    assert any("given: goal prints the challenge's answer (260)" in p for p in found)
    assert any("off: wrong = 260 passes" in p for p in found), found


def test_lesson_check_wants_two_challenges_per_lesson(monkeypatch):
    found = check_only(monkeypatch, entry())
    assert "1 [[challenges]]; give at least 2" in found


# --- the endpoint --------------------------------------------------------------------

EDGE = "/course/cache-layers/challenges/edge-big-enough"
SERVER = "/course/cache-layers/challenges/server-alone"


@pytest.fixture
def learner(db):
    user = get_user_model().objects.create_user("learner", password="pw-learner-1")
    client = Client()
    client.force_login(user)
    return user, client


@pytest.mark.django_db
def test_an_answer_needs_the_csrf_token():
    client = Client(enforce_csrf_checks=True)
    assert client.post(EDGE, {"edge_capacity": "24"}, headers=JSON).status_code == 403
    page = client.get("/course/cache-layers/")
    token = page.cookies["csrftoken"].value
    answer = client.post(
        EDGE,
        {"edge_capacity": "24", "csrfmiddlewaretoken": token},
        headers=JSON,
    )
    assert answer.status_code == 200
    assert answer.json()["solved"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "data", "reason"),
    [
        (EDGE, {}, "Give a value for edge_capacity."),
        (EDGE, {"edge_capacity": "-1"}, "edge_capacity: must be at least 0, got -1."),
        (EDGE, {"edge_capacity": "ten"}, "edge_capacity: 'ten' is not a whole number."),
        (EDGE, {"edge_capacity": "24", "users": "3"}, "Users stays as it is"),
        (EDGE, {"edge_capacity": "24", "action": "guess"}, "Action must be"),
        (SERVER, {"answer": "many"}, "Answer with a number, like 12 or 8.5."),
        (SERVER, {}, "Answer with a number"),
    ],
)
def test_an_answer_that_cannot_be_checked_is_a_400_with_the_reason(
    client, url, data, reason
):
    answer = client.post(url, data, headers=JSON)
    assert answer.status_code == 400
    assert reason in answer.json()["error"]
    assert answer.json()["error"].endswith(".")
    assert not ChallengeProgress.objects.exists()


@pytest.mark.django_db
def test_answers_past_the_minutes_limit_get_429_with_retry_after(
    client, redis_client, settings
):
    settings.LAB_CHALLENGE_ANSWERS_PER_MINUTE = 2
    for _ in range(2):
        assert client.post(SERVER, {"answer": "3"}, headers=JSON).status_code == 200
    refused = client.post(SERVER, {"answer": "3"}, headers=JSON)
    assert refused.status_code == 429
    assert "2 answers checked in the last minute" in refused.json()["error"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    # Without JavaScript: the lesson page, the reason under the challenge.
    page = client.post(SERVER, {"answer": "3"})
    assert page.status_code == 429
    assert "2 answers checked in the last minute" in page.content.decode()


@pytest.mark.django_db
def test_only_the_lessons_own_challenges_answer(client):
    assert client.post("/course/cache-layers/challenges/nope", {}).status_code == 404
    assert client.post("/course/nope/challenges/edge-big-enough", {}).status_code == 404
    assert client.get(EDGE).status_code == 405


def test_a_signed_in_learner_solves_and_it_counts_everywhere(learner):
    user, client = learner
    wrong = client.post(EDGE, {"edge_capacity": "20"}, headers=JSON).json()
    assert wrong["solved"] is False
    assert wrong["debrief"] == ""
    assert wrong["progress"] == {"solved": 0, "total": N}
    right = client.post(EDGE, {"edge_capacity": "24"}, headers=JSON).json()
    assert right["solved"] is True
    assert right["attempts"] == 2
    assert "24 entries" in right["debrief"]
    assert right["lessons"] == [
        {"title": "HTTP Caching", "url": "/course/http-caching/"}
    ]
    assert right["progress"] == {"solved": 1, "total": N}
    row = ChallengeProgress.objects.get(user=user, challenge="edge-big-enough")
    assert row.solved_at is not None
    assert row.attempts == 2
    assert row.answer == {"edge_capacity": "24"}
    # A later wrong answer counts as an attempt but never unsolves it.
    later = client.post(EDGE, {"edge_capacity": "3"}, headers=JSON).json()
    assert later["solved"] is False
    assert later["solved_before"] is True
    row.refresh_from_db()
    assert row.solved_at is not None
    assert row.attempts == 3

    page = client.get("/course/cache-layers/").content.decode()
    assert f"1 of {N} challenges solved" in page
    assert "Why it works." in page
    index = client.get("/course/").content.decode()
    assert re.search(rf"data-challenges>\s*1/{N} challenges", index)
    account = client.get("/account/").content.decode()
    assert re.search(rf"data-challenges-total>1 / {len(ALL)}<", account)


@pytest.mark.django_db
def test_the_debrief_is_not_on_the_page_before_the_challenge_is_solved(client):
    page = client.get("/course/cache-layers/").content.decode()
    assert 'id="challenge-edge-big-enough"' in page
    assert "only answers that are identical for every user; loan histories" not in page
    assert f"0 of {N} challenges solved" in page


@pytest.mark.django_db
def test_hints_open_one_at_a_time_and_stay_open(client):
    first = client.post(SERVER, {"action": "hint"}, headers=JSON)
    assert first.status_code == 200
    assert len(first.json()["hints"]) == 1
    assert first.json()["left"] == 1
    page = client.get("/course/cache-layers/").content.decode()
    assert "never forgets one" in page  # the first hint, now on the page
    assert "Every request that is not the first one" not in page
    second = client.post(SERVER, {"action": "hint"}, headers=JSON).json()
    assert len(second["hints"]) == 2
    assert second["left"] == 0
    third = client.post(SERVER, {"action": "hint"}, headers=JSON)
    assert third.status_code == 400
    assert third.json()["error"] == "Every hint is already open."


@pytest.mark.django_db
def test_without_javascript_the_form_goes_back_to_the_challenge_with_its_outcome(
    client,
):
    sent = client.post(SERVER, {"action": "answer", "answer": "260"})
    assert sent.status_code == 303
    assert sent["Location"] == "/course/cache-layers/#challenge-server-alone"
    page = client.get("/course/cache-layers/").content.decode()
    assert "Not yet: 260 requests is too low." in page
    assert 'value="260"' in page  # the answer stays in its field
    again = client.get("/course/cache-layers/").content.decode()
    assert "is too low" not in again  # shown once
    client.post(SERVER, {"answer": "547"})
    page = client.get("/course/cache-layers/").content.decode()
    assert "Solved: that is the model&#x27;s figure." in page
    assert f"1 of {N} challenges solved" in page
    hint = client.post(SERVER, {"action": "hint"})
    assert hint.status_code == 303


@pytest.mark.django_db
def test_without_javascript_an_unreadable_answer_is_a_400_page_with_the_reason(
    client,
):
    sent = client.post(EDGE, {"edge_capacity": "lots"})
    assert sent.status_code == 400
    page = sent.content.decode()
    assert "edge_capacity: &#x27;lots&#x27; is not a whole number." in page
    assert 'aria-invalid="true"' in page
    # Said at the top too, with a link to the challenge: the page opens there.
    assert "could not be checked. edge_capacity: &#x27;lots&#x27;" in page
    assert 'href="#challenge-edge-big-enough">Back to the challenge</a>' in page


@pytest.mark.django_db
def test_a_visitors_challenges_live_in_the_session_and_carry_over_on_sign_up():
    from course.tests.test_accounts import sign_up

    client = Client()
    client.post(EDGE, {"edge_capacity": "20"}, headers=JSON)
    assert client.post(EDGE, {"edge_capacity": "24"}, headers=JSON).json()["solved"]
    client.post(SERVER, {"action": "hint"}, headers=JSON)
    client.post(SERVER, {"answer": "1"}, headers=JSON)
    kept = client.session[PROGRESS_KEY]["cache-layers"]["challenges"]
    assert kept["edge-big-enough"] == {
        "attempts": 2,
        "solved": True,
        "answer": {"edge_capacity": "24"},
    }
    assert kept["server-alone"] == {"hints": 1, "attempts": 1}
    assert f"1/{N} challenges" in client.get("/course/").content.decode()
    assert not ChallengeProgress.objects.exists()

    sign_up(client)
    user = get_user_model().objects.get(username="ada")
    solved = ChallengeProgress.objects.get(user=user, challenge="edge-big-enough")
    assert solved.solved_at is not None
    assert solved.attempts == 2
    assert solved.answer == {"edge_capacity": "24"}
    open_one = ChallengeProgress.objects.get(user=user, challenge="server-alone")
    assert (open_one.hints, open_one.attempts, open_one.solved_at) == (1, 1, None)
    assert PROGRESS_KEY not in client.session


def test_adopting_merges_with_what_the_account_has_and_skips_what_is_not_ours(learner):
    user, client = learner
    client.post(SERVER, {"action": "hint"}, headers=JSON)
    client.post(SERVER, {"answer": "3"}, headers=JSON)
    merged = challenges_adopt(
        user_id=user.pk,
        progress={
            "cache-layers": {
                "challenges": {
                    "server-alone": {"attempts": 2, "hints": 2, "solved": True},
                    "NOT AN ID": {"attempts": 9},
                    "edge-big-enough": "tampered",
                }
            },
            "not a slug!": {"challenges": {"x1": {"attempts": 1}}},
        },
    )
    assert merged == 1
    row = ChallengeProgress.objects.get(user=user)
    assert (row.attempts, row.hints) == (3, 2)
    assert row.solved_at is not None

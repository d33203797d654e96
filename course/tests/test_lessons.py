"""Lesson pages: the text, its numbers, diagrams, code links, questions and progress."""

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from course import textbook
from course.labs.registry import LABS, lab_get
from course.lesson_checks import (
    lesson_problems,
    number_pattern,
    prediction_giveaways,
    visible_before_prediction,
)
from course.lessons import LESSONS
from course.models import LessonProgress
from course.selectors import PREDICTION_KEY
from course.sourcecode import (
    SNIPPET_MAX_LINES,
    RefError,
    ref_resolve,
    ref_snippet,
    source_path_allowed,
)
from course.tests.labwork import own_run, run_waiting
from course.textbook import (
    CONTENT_DIR,
    LessonText,
    LessonTextError,
    _load,
    cell_text,
    default_tables,
    lesson_text,
    placeholders_fill,
    table_cell,
)
from jobs.models import JobStatus

SLUGS = [lesson.slug for lesson in LESSONS]
OVERLAP_TOOL = Path(__file__).resolve().parents[3] / "shared/tools/course_overlap.py"


@pytest.fixture
def learner(db):
    user = get_user_model().objects.create_user("learner", password="pw-learner-1")
    client = Client()
    client.force_login(user)
    return user, client


# --- the text of every lesson -----------------------------------------------------


@pytest.mark.parametrize("slug", SLUGS)
def test_every_lesson_meets_the_page_rules(slug):
    """Words, sections, diagram, tables explained, predict, links and questions."""
    lesson = next(x for x in LESSONS if x.slug == slug)
    assert lesson_problems(lesson) == []


@pytest.mark.django_db
@pytest.mark.parametrize("slug", SLUGS)
def test_every_lesson_page_renders_its_parts(client, slug):
    text = lesson_text(slug)
    assert text is not None
    html = client.get(f"/course/{slug}/").content.decode()
    assert "data-lesson-text" in html
    for heading in text.toc:
        assert f'id="{heading.anchor}"' in html
        if heading.level == 2:
            assert f'href="#{heading.anchor}"' in html  # the table of contents
    assert f"{text.reading_minutes} min read" in html
    assert html.count('class="question"') == len(text.questions)
    assert html.count('<figure class="diagram" data-diagram=') == len(text.figures) >= 1
    for name in text.tables:
        assert f'data-table="{name}"' in html
    assert f"/asynchronous-processing/{slug}" in html  # the course's lesson, cited
    number = next(x.number for x in LESSONS if x.slug == slug)
    assert ('rel="prev"' in html) == (number > 1)
    assert ('rel="next"' in html) == (number < 25)


@pytest.mark.parametrize("slug", SLUGS)
def test_lesson_html_carries_no_markup_of_its_own(slug):
    text = lesson_text(slug)
    assert text is not None
    assert "<script" not in text.html
    assert "javascript:" not in text.html
    assert not re.search(r"<[^>]+\son[a-z]+=", text.html)


def test_markup_in_a_lesson_file_is_escaped_or_dropped():
    hostile = (
        "+++\n+++\n## Part\n\n<script>alert(1)</script>\n\n"
        '<img src=x onerror="alert(2)">\n\n[click](javascript:alert(3))\n\n'
        "[[diagram:../../../etc/passwd]]\n"
    )
    text = _load("cache-layers", hostile)
    assert "<script" not in text.html
    assert "&lt;script&gt;" in text.html
    assert "<img" not in text.html
    assert 'href="javascript:' not in text.html
    assert "passwd" in text.html  # the marker is not a diagram name: left as text


def test_a_lesson_file_without_front_matter_is_refused():
    with pytest.raises(LessonTextError):
        _load("cache-layers", "## no front matter\n")


def test_numbers_in_the_text_come_from_the_model():
    tables = default_tables("cache-layers")
    origin = next(r for r in tables["chain"]["rows"] if r[0] == "origin")
    text = _load(
        "cache-layers",
        "+++\n+++\n## A\n\nOrigin share {{chain[origin].share_pct}} of "
        "{{param:requests}} requests; {{chain[#0].layer}}; "
        "{{chain[nope].share_pct}}.\n",
    )
    assert f"Origin share {origin[2]} of 600 requests; client; ?." in text.html
    assert text.problems == (
        "{{chain[nope].share_pct}}: table 'chain' has no row 'nope'",
    )


@pytest.mark.skipif(not OVERLAP_TOOL.is_file(), reason="the course's overlap tool")
@pytest.mark.parametrize("words", ["10", "8"])
def test_lessons_do_not_repeat_the_course(words):
    done = subprocess.run(
        [sys.executable, str(OVERLAP_TOOL), "--words", words, str(CONTENT_DIR)],
        capture_output=True,
        text=True,
        cwd=CONTENT_DIR.parents[1],
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]


# --- code references and the source view --------------------------------------------


def _text(slug: str) -> LessonText:
    text = lesson_text(slug)
    assert text is not None, f"no text for {slug}"
    return text


def _all_refs():
    texts = [lesson_text(slug) for slug in SLUGS]
    return sorted(
        {link.ref for text in texts if text is not None for link in text.code}
    )


@pytest.mark.django_db
@pytest.mark.parametrize("ref", _all_refs())
def test_every_code_reference_opens_at_its_lines(client, ref):
    target = ref_resolve(ref)
    response = client.get(
        f"/course/source/{target.path}?lines={target.start}-{target.end}"
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="L-{target.start}"' in html
    assert 'class="hll"' in html  # the referenced lines are marked


def test_refs_resolve_to_the_definition():
    target = ref_resolve("course.sourcecode.ref_resolve")
    lines = (CONTENT_DIR.parents[1] / target.path).read_text().splitlines()
    # A decorated function starts at its decorator.
    assert lines[target.start - 1] == "@lru_cache(maxsize=512)"
    assert lines[target.start].startswith("def ref_resolve(")
    constant = ref_resolve("course.textbook.MIN_WORDS")
    assert (
        "MIN_WORDS = "
        in (CONTENT_DIR.parents[1] / constant.path)
        .read_text()
        .splitlines()[constant.start - 1]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "manage.py",
        ".env",
        "config/../manage.py",
        "var/library.sqlite3",
        ".git/config",
        "library/no_such_file.py",
        "library/%2e%2e/manage.py",
        "/etc/passwd",
        "library\\models.py",
    ],
)
def test_source_view_shows_only_project_code(client, path):
    assert client.get(f"/course/source/{path}").status_code == 404


def test_source_paths_stay_inside_the_repository():
    assert source_path_allowed("library/services/loans.py") is not None
    assert source_path_allowed("library/../manage.py") is None
    assert source_path_allowed("requirements.txt") is None


# --- the course index and the live badge --------------------------------------------


@pytest.mark.django_db
def test_index_shows_areas_outcomes_reading_time(client):
    html = client.get("/course/").content.decode()
    assert html.count('class="lesson-card') == 25
    assert html.count("After this part you can") == 4
    minutes = sum(_text(slug).reading_minutes for slug in SLUGS)
    # The unit in its own, smaller span: it may go under the number (a narrow box).
    assert f'<dd>{minutes}<span class="stat-unit"> min</span></dd>' in html
    assert "to keep your progress in an account" in html


@pytest.mark.django_db
def test_live_badge_and_command_render_for_a_lab_with_a_live_part(client):
    assert LABS["cache-layers"].live is not None
    html = client.get("/course/cache-layers/").content.decode()
    assert '<span class="badge badge-info">live</span>' in html
    assert "python manage.py lab cache-layers --live --json" in html


@pytest.mark.django_db
def test_anonymous_lesson_page_costs_no_query(client, django_assert_num_queries):
    client.get("/course/cache-layers/")  # warm the text and model caches
    with django_assert_num_queries(0):
        assert client.get("/course/cache-layers/").status_code == 200


# --- progress -----------------------------------------------------------------------


def test_progress_is_kept_and_shown(learner):
    user, client = learner
    text = _text("invalidation")
    assert (
        client.post("/course/invalidation/progress", {"event": "read"}).status_code
        == 303
    )
    for question in (0, 2, 2):
        response = client.post(
            "/course/invalidation/progress",
            {"event": "answer", "question": question},
            HTTP_ACCEPT="application/json",
        )
        assert response.json() == {"ok": True}
    row = LessonProgress.objects.get(user=user, slug="invalidation")
    assert row.read_at is not None
    assert row.answered == [0, 2]

    index = client.get("/course/").content.decode()
    card = index[index.index('data-lesson="invalidation"') :][:1500]
    assert "data-read>read<" in card
    assert f"2/{len(text.questions)} answers" in card
    assert "1 of 7 read" in index  # the caching area's bar
    page = client.get("/course/invalidation/").content.decode()
    assert f"2 of {len(text.questions)} answers opened" in page
    assert 'data-question="2" data-answered' in page


@pytest.mark.django_db
def test_progress_needs_a_real_event_and_question(client, learner):
    # A visitor's step is kept in their session (course.visitors).
    assert (
        client.post("/course/invalidation/progress", {"event": "read"}).status_code
        == 303
    )
    assert client.session["course_progress"] == {"invalidation": {"read": True}}
    _, signed_in = learner
    assert (
        signed_in.post("/course/invalidation/progress", {"event": "nap"}).status_code
        == 400
    )
    for question in ("-1", "99", "x"):
        response = signed_in.post(
            "/course/invalidation/progress", {"event": "answer", "question": question}
        )
        assert response.status_code == 400
    assert signed_in.post("/course/nope/progress", {"event": "read"}).status_code == 404


def test_progress_post_requires_csrf(learner):
    user, _ = learner
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert (
        strict.post("/course/invalidation/progress", {"event": "read"}).status_code
        == 403
    )


# --- predict, run, compare ------------------------------------------------------------


def test_a_run_keeps_the_prediction_and_is_explained(
    learner, django_capture_on_commit_callbacks
):
    user, client = learner
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            "/course/cache-layers/run",
            {"edge_capacity": "2", "prediction": "12.5"},
            HTTP_ACCEPT="application/json",
        )
    assert response.status_code == 202
    job_id = uuid.UUID(response.json()["job"])
    job = JobStatus.objects.get(pk=job_id)
    assert job.params[PREDICTION_KEY] == 12.5
    assert LessonProgress.objects.get(user=user, slug="cache-layers").lab_runs == 1
    explain = f"/course/cache-layers/runs/{job_id}/explained"
    assert client.get(explain).status_code == 204  # not run yet: nothing to explain

    run_waiting()  # what a lab worker does, in this process
    html = client.get(explain).content.decode()
    lab = lab_get("cache-layers")
    ours = lab.run({**lab.defaults(), "edge_capacity": 2})["tables"]
    spec = _text("cache-layers").predict
    assert spec is not None
    expected = table_cell(ours, spec.table, spec.row, spec.column)
    assert (
        "<code>edge_capacity</code> from <strong>10</strong> to <strong>2</strong>"
        in html
    )
    assert _text("cache-layers").params["edge_capacity"][:40] in html
    assert f"data-model-value>{expected} {spec.unit}<" in html
    assert f"data-predicted>12.5 {spec.unit}<" in html
    # The edge's share is what a smaller edge moves first.
    assert (
        "<td><code>chain</code></td><td>edge</td><td><code>share_pct</code></td>"
        in html
    )
    page = client.get(f"/course/cache-layers/?job={job_id}").content.decode()
    assert "data-interpretation" in page  # a reload shows it too


@pytest.mark.django_db
def test_a_prediction_that_is_not_a_number_is_a_field_error(client):
    response = client.post(
        "/course/cache-layers/run",
        {"prediction": "lots"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 400
    assert "prediction" in response.json()["errors"]


def test_explaining_a_run_of_another_lab_is_404(learner):
    _, client = learner
    job = JobStatus.objects.create(kind="lab", name="invalidation", params={})
    assert (
        client.get(f"/course/cache-layers/runs/{job.id}/explained").status_code == 404
    )


def test_a_placeholder_with_changed_parameters_is_computed_by_the_model():
    problems: list[str] = []
    lab = lab_get("cache-layers")
    text = placeholders_fill(
        "{{chain[origin].requests}} and {{chain[origin].requests@requests=900}}"
        " and {{chain[origin].requests@requests=nine}}",
        default_tables(lab.slug),
        lab,
        problems,
    )
    ours = lab.run(lab.resolve({"requests": "900"}))["tables"]
    assert (
        text.split(" and ")[1] == f"{table_cell(ours, 'chain', 'origin', 'requests'):,}"
    )
    assert text.endswith("?")
    bad = "{{chain[origin].requests@requests=nine}}"
    assert problems == [f"{bad}: requests: 'nine' is not a whole number"]


# --- every file and dotted name the prose mentions resolves ---------------------------

ROOT = CONTENT_DIR.parents[1]
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"[\w.<>-]+(?:/[\w.<>-]+)+/?")
# The repository's own top-level packages: a dotted name starting with one is code.
_PACKAGES = {"library", "messaging", "realtime", "jobs", "course", "config", "bench"}


def _prose_spans(slug: str) -> list[str]:
    """Return the inline code spans of a lesson's body (not its fenced code)."""
    text = (CONTENT_DIR / f"{slug}.md").read_text(encoding="utf-8")
    body = text.split("+++", 2)[2]
    body = re.sub(r"^```.*?^```", "", body, flags=re.DOTALL | re.MULTILINE)
    return _CODE_SPAN.findall(body)


def _permission_exists(dotted: str) -> bool:
    """Whether ``app_label.codename`` names a permission of this project's models."""
    from django.apps import apps

    app_label, _, codename = dotted.partition(".")
    try:
        config = apps.get_app_config(app_label)
    except LookupError:
        return False
    for model in config.get_models():
        meta = model._meta
        defaults = {
            f"{action}_{meta.model_name}" for action in meta.default_permissions
        }
        if codename in defaults | {name for name, _ in meta.permissions}:
            return True
    return False


def _mentions() -> list[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for slug in SLUGS:
        for span in _prose_spans(slug):
            if (_DOTTED.fullmatch(span) and span.split(".")[0] in _PACKAGES) or (
                _PATH.fullmatch(span) and (ROOT / span.split("/")[0]).is_dir()
            ):
                found.add((slug, span))
    return sorted(found)


def test_the_prose_mentions_code_and_files():
    """The search below finds what it must, so an empty parametrization cannot pass."""
    names = {span for _, span in _mentions()}
    assert "course.services.labqueue.lab_run_request" in names
    assert "realtime/front.py" in names
    assert len(names) > 40


@pytest.mark.parametrize(("slug", "span"), _mentions())
def test_every_file_and_dotted_name_in_the_prose_resolves(slug, span):
    if "/" in span:
        assert (ROOT / span).exists(), f"{slug}: `{span}` is no file of the repository"
        return
    try:
        ref_resolve(span)
        resolved = True
    except (RefError, ImportError):
        resolved = False
    # A dotted name is code, or (library.correct_stock) a permission of a model.
    assert resolved or _permission_exists(span), f"{slug}: `{span}` does not resolve"


# --- the code on the page -------------------------------------------------------------


def _definition_mark(ref: str) -> str:
    """The highlighted token a definition of ``ref`` starts with (Pygments' classes)."""
    import inspect
    import pydoc

    found = pydoc.locate(ref)
    name = ref.rsplit(".", 1)[-1]
    if inspect.ismodule(found):
        return '<span class="sd">&quot;&quot;&quot;'
    if inspect.isclass(found):
        return f'<span class="nc">{name}</span>'
    if callable(found) or isinstance(found, property):
        return f'<span class="{"fm" if name.startswith("__") else "nf"}">{name}</span>'
    return f'<span class="n">{name}</span>'


@pytest.mark.django_db
@pytest.mark.parametrize("slug", SLUGS)
def test_every_lesson_page_shows_its_code_highlighted(client, slug):
    html = client.get(f"/course/{slug}/").content.decode()
    for link in _text(slug).code:
        snippet = ref_snippet(link.ref)
        assert snippet.html in html, f"{link.ref}: its definition is not on the page"
        section = html[html.index(snippet.html) - 800 : html.index(snippet.html)]
        assert '<details class="code-inline"' in section  # collapsible
        mark = _definition_mark(link.ref)
        assert mark in snippet.html.replace('"""', "&quot;&quot;&quot;"), link.ref
        target = ref_resolve(link.ref)
        number = f'<span class="ln" aria-hidden="true">{target.start:>4}</span>'
        # A definition's own first line number; a module shows its docstring.
        assert number in snippet.html or target.start == target.end == 1
        if snippet.trimmed:
            end = html.index(snippet.html) + len(snippet.html)
            assert "read the whole definition in the source view" in html[end:][:600]


def test_a_long_definition_is_trimmed_and_a_class_shows_its_outline():
    whole = ref_resolve("jobs.backpressure.BoundedQueue")
    snippet = ref_snippet("jobs.backpressure.BoundedQueue")
    assert snippet.total == whole.end - whole.start + 1 > SNIPPET_MAX_LINES
    assert snippet.trimmed
    assert snippet.shown <= SNIPPET_MAX_LINES
    assert '<span class="fm">__init__</span>' in snippet.html  # a method's signature
    assert "lines not shown" in snippet.html
    short = ref_snippet("realtime.sse.sse_event")
    assert not short.trimmed
    assert short.signature.startswith("def sse_event(")


# --- predict first, then reveal -------------------------------------------------------

HOT = "hot-key-and-stampede-effect"
# Closed <details>: held-back parts, and the questions' answers (opened on demand).
_FOLDED = re.compile(
    r"<details class=\"(?:answer-hold|question)[^>]*>.*?</details>", re.DOTALL
)


def _predicted_text(slug: str) -> str:
    spec = _text(slug).predict
    assert spec is not None
    return cell_text(
        table_cell(default_tables(slug), spec.table, spec.row, spec.column)
    )


@pytest.mark.parametrize("slug", SLUGS)
def test_every_lesson_holds_back_what_gives_the_answer_away(slug):
    text = _text(slug)
    assert text.html.count('<details class="answer-hold" data-answer-hold>') >= 1
    assert " open" not in "".join(
        re.findall(r"<details class=\"answer-hold[^>]*>", text.html)
    )
    assert text.html_revealed.count("data-answer-hold open>") == text.html.count(
        "data-answer-hold>"
    )
    spec = text.predict
    assert spec is not None
    # The published table holding the predicted cell is always held back.
    if spec.table in text.tables:
        assert f"table:{spec.table}" in text.held
    assert prediction_giveaways(text, default_tables(slug)) == []
    # What the learner reads first (the prose outside the folds) is really checked.
    assert dict(visible_before_prediction(text))["prose"]


def _giveaway_lesson(body: str, predict_extra: str = "") -> LessonText:
    return _load(
        HOT,
        '+++\n[predict]\nprompt = "Busiest?"\ntable = "shards"\nrow = "single key"\n'
        f'column = "busiest_pct"\nunit = "%"\n{predict_extra}+++\n{body}',
    )


def test_the_check_flags_a_predicted_figure_shown_before_the_prediction():
    tables = default_tables(HOT)
    value = _predicted_text(HOT)
    shown = _giveaway_lesson(
        "## A\n\nIt carries {{shards[single key].busiest_pct}} %.\n\n[[table:shards]]\n"
    )
    problems = prediction_giveaways(shown, tables)
    assert any(f"the answer {value} shows" in p and "in prose" in p for p in problems)
    assert any("the table 'shards' holds the answer" in p for p in problems)

    held = _giveaway_lesson(
        "## A\n\n::: answer\nIt carries {{shards[single key].busiest_pct}} %.\n:::\n\n"
        "[[table:shards]]\n",
        'reveals = ["table:shards"]\n',
    )
    assert prediction_giveaways(held, tables) == []
    assert held.held == ("table:shards",)
    assert held.html.count("<details") == 1  # the table and the passage: one fold

    # A phrase where the number means something else may be listed, but only if used.
    unrelated = _giveaway_lesson(
        "## A\n\nRoom {{shards[single key].busiest_pct}} is booked.\n",
        'unrelated = ["Room {{shards[single key].busiest_pct}}", "never written"]\n',
    )
    assert prediction_giveaways(unrelated, tables) == [
        "[predict] unrelated 'never written': not in the text shown before the "
        "prediction"
    ]


def test_a_reveal_naming_a_block_the_body_lacks_is_a_problem():
    text = _giveaway_lesson("## A\n\nNothing here.\n", 'reveals = ["table:nope"]\n')
    assert text.problems == (
        "[predict] reveals 'table:nope': no such block in the body",
    )


def _holds(html: str) -> list[str]:
    return re.findall(r"<details class=\"answer-hold[^>]*>", html)


@pytest.mark.django_db
def test_the_page_holds_the_answer_until_a_prediction_or_a_reveal(client):
    value = _predicted_text(HOT)
    page = client.get(f"/course/{HOT}/").content.decode()
    assert _holds(page)
    assert all(" open" not in hold for hold in _holds(page))
    outside = _FOLDED.sub("", page[page.index("data-lesson-text") :])
    assert not number_pattern(value).search(re.sub(r"<[^>]+>", " ", outside))
    assert "With the defaults (the lesson&#x27;s run):" in page

    guessed = client.get(f"/course/{HOT}/?prediction=55").content.decode()
    assert all(" open" in hold for hold in _holds(guessed))
    assert 'name="prediction" value="55"' in guessed  # the lab form has it too
    assert "Your prediction: <strong>55 %</strong>" in guessed

    shown = client.get(f"/course/{HOT}/?reveal=1").content.decode()
    assert all(" open" in hold for hold in _holds(shown))
    assert "Shown without a prediction" in shown

    wrong = client.get(f"/course/{HOT}/?prediction=lots").content.decode()
    assert all(" open" not in hold for hold in _holds(wrong))
    assert "Give a number, like 12 or 8.5." in wrong


@pytest.mark.django_db
def test_a_run_that_kept_a_prediction_reveals_on_reload(client):
    lab = lab_get(HOT)
    result = lab.run(lab.validate({"shards": 8}))
    kept = JobStatus.objects.create(
        kind="lab",
        name=HOT,
        params={**result["params"], PREDICTION_KEY: 61.5},
        state="done",
        result=result,
    )
    own_run(client, kept)
    page = client.get(f"/course/{HOT}/?job={kept.id}").content.decode()
    assert all(" open" in hold for hold in _holds(page))
    assert 'name="prediction" value="61.5"' in page
    # The question is now about the learner's parameters, and says so.
    assert "With your parameters (shards=8)" in page

    blind = JobStatus.objects.create(
        kind="lab", name=HOT, params=result["params"], state="done", result=result
    )
    page = client.get(f"/course/{HOT}/?job={blind.id}").content.decode()
    assert all(" open" not in hold for hold in _holds(page))


def test_model_runs_are_kept_on_disk_for_every_process(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    textbook.model_cache_dir.cache_clear()
    lab = lab_get("cache-layers")
    params = lab.resolve({"requests": "321"})
    try:
        first = textbook.model_tables(lab, params)
        kept = list(tmp_path.glob("cache/models/*/cache-layers-*.json"))
        assert len(kept) == 1
        # Another process finds the run on disk: the model need not run again.
        original = lab.model

        def broken(params, progress):
            raise AssertionError("the model ran again")

        object.__setattr__(lab, "model", broken)
        try:
            assert textbook.model_tables(lab, params) == first
        finally:
            object.__setattr__(lab, "model", original)
    finally:
        textbook.model_cache_dir.cache_clear()


# --- "When it went wrong": a public incident, its write-up and the lab figure ---------

_INCIDENT_HEADING = re.compile(r"^## When it went wrong: \S.*$", re.MULTILINE)
_INCIDENT_LINK = re.compile(r"\]\((https://[^)\s]+)\)")
_INCIDENT_FIGURE = re.compile(
    r"\{\{\s*[a-z0-9_]+\[[^\]]+\]\.[a-z0-9_]+(?:@[^}]*)?\s*\}\}"
)
_INCIDENT_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019-]*")


def _incident(slug: str) -> tuple[str, str] | None:
    """The lesson's incident section and the heading that follows it, or None."""
    body = (CONTENT_DIR / f"{slug}.md").read_text(encoding="utf-8").split("+++", 2)[2]
    found = _INCIDENT_HEADING.search(body)
    if found is None:
        return None
    end = body.find("\n## ", found.end())
    following = body[end + 1 :].split("\n", 1)[0] if end != -1 else ""
    return body[found.start() : end if end != -1 else len(body)], following


INCIDENT_SLUGS = [slug for slug in SLUGS if _incident(slug) is not None]


def test_at_least_ten_lessons_tell_an_incident():
    assert len(INCIDENT_SLUGS) >= 10, INCIDENT_SLUGS


@pytest.mark.parametrize("slug", INCIDENT_SLUGS)
def test_an_incident_links_its_write_up_and_ties_a_lab_figure(slug):
    found = _incident(slug)
    assert found is not None
    section, following = found
    # One section, placed before the summary or the broker comparison.
    assert len(_INCIDENT_HEADING.findall(section)) == 1
    assert following in ("## Summary", "## In your broker"), following
    # The public write-up is linked, and a figure of the lesson's own lab ties it in.
    assert _INCIDENT_LINK.search(section), f"{slug}: no link to the write-up"
    assert _INCIDENT_FIGURE.search(section), f"{slug}: no lab figure"
    # Short: 150 to 300 words, a placeholder counted as one and link targets as none.
    prose = _INCIDENT_LINK.sub(
        "]", _INCIDENT_FIGURE.sub("N", section.split("\n", 1)[1])
    )
    words = len(_INCIDENT_WORD.findall(prose))
    assert 150 <= words <= 300, f"{slug}: {words} words"

"""What the course pages show, put together from the lessons, their texts and progress.

Views call these and render; nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import NoReverseMatch, reverse

from course.challenges.spec import challenge_ids
from course.forms import PREDICTION_ERROR, prediction_parse
from course.interpret import Interpretation, figure_text, run_interpret
from course.labs.harness.base import Lab
from course.labs.registry import LABS
from course.lessons import AREA_OUTCOMES, LESSONS, Area, Lesson, lessons_by_area
from course.selectors import LIVE_KEY, NO_PROGRESS, PREDICTION_KEY, ProgressView
from course.sourcecode import CodeRef, RefError, Snippet, ref_resolve, ref_snippet
from course.textbook import LessonText, lesson_outline
from jobs.models import JobStatus


@dataclass(frozen=True)
class LessonEntry:
    lesson: Lesson
    minutes: int
    questions: int
    has_lab: bool
    progress: ProgressView
    challenges: tuple[str, ...] = ()

    @property
    def answered(self) -> int:
        return self.progress.answered_of(self.questions)

    @property
    def solved(self) -> int:
        return self.progress.solved_of(self.challenges)

    @property
    def confirmed(self) -> int:
        """Challenges whose solved answer a live run confirmed."""
        return self.progress.confirmed_of(self.challenges)


@dataclass(frozen=True)
class AreaEntry:
    area: Area
    outcome: str
    lessons: tuple[LessonEntry, ...]

    @property
    def minutes(self) -> int:
        return sum(entry.minutes for entry in self.lessons)

    @property
    def read(self) -> int:
        return sum(1 for entry in self.lessons if entry.progress.read)

    @property
    def read_pct(self) -> int:
        return round(100 * self.read / len(self.lessons)) if self.lessons else 0


def _entry(lesson: Lesson, progress: dict[str, ProgressView]) -> LessonEntry:
    outline = lesson_outline(lesson.slug)
    return LessonEntry(
        lesson=lesson,
        minutes=outline.reading_minutes if outline is not None else 1,
        questions=outline.questions if outline is not None else 0,
        has_lab=lesson.slug in LABS,
        progress=progress.get(lesson.slug, NO_PROGRESS),
        challenges=challenge_ids(lesson.slug),
    )


def course_areas(progress: dict[str, ProgressView]) -> list[AreaEntry]:
    """Return the areas with their lessons, reading times and the learner's progress."""
    return [
        AreaEntry(
            area=area,
            outcome=AREA_OUTCOMES[area],
            lessons=tuple(_entry(lesson, progress) for lesson in lessons),
        )
        for area, lessons in lessons_by_area()
    ]


def lesson_neighbours(lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    """Return the lessons before and after ``lesson`` in course order."""
    index = lesson.number - 1
    before = LESSONS[index - 1] if index > 0 else None
    after = LESSONS[index + 1] if index + 1 < len(LESSONS) else None
    return before, after


@dataclass(frozen=True)
class CodeLinkView:
    ref: str
    text: str
    target: CodeRef | None
    url: str
    snippet: Snippet | None = None


def code_links(text: LessonText | None) -> list[CodeLinkView]:
    """Resolve the lesson's code references to source-view links (tested to resolve)."""
    if text is None:
        return []
    links = []
    for link in text.code:
        try:
            target: CodeRef | None = ref_resolve(link.ref)
        except (RefError, ImportError):
            target = None  # shown without a link; lesson_check and the tests fail on it
        url = ""
        snippet = None
        if target is not None:
            lines = f"{target.start}-{target.end}"
            url = (
                f"{reverse('course-source', args=[target.path])}?lines={lines}"
                f"#{target.anchor}"
            )
            snippet = ref_snippet(link.ref)
        links.append(CodeLinkView(link.ref, link.text, target, url, snippet))
    return links


@dataclass(frozen=True)
class SeeLinkView:
    label: str
    text: str
    url: str


def see_links(text: LessonText | None) -> list[SeeLinkView]:
    if text is None:
        return []
    links = []
    for see in text.see:
        try:
            url = reverse(see.url, args=list(see.args))
        except NoReverseMatch:
            continue
        links.append(SeeLinkView(see.label, see.text, url))
    return links


@dataclass(frozen=True)
class RunExplained:
    interpretation: Interpretation
    live: bool
    prediction: float | None


def _stored_prediction(params: dict[str, Any]) -> float | None:
    value = params.get(PREDICTION_KEY)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def run_explain(
    *, lab: Lab[Any], text: LessonText | None, job: JobStatus
) -> RunExplained | None:
    """Return what a finished run says, or None while it runs or when it failed."""
    result = job.result if isinstance(job.result, dict) else None
    if job.state != JobStatus.State.DONE or result is None:
        return None
    tables = result.get("tables")
    params = result.get("params")
    if not isinstance(tables, dict) or not isinstance(params, dict):
        return None
    stored = job.params if isinstance(job.params, dict) else {}
    prediction = _stored_prediction(stored)
    return RunExplained(
        interpretation=run_interpret(
            lab=lab, text=text, params=params, tables=tables, predicted=prediction
        ),
        live=stored.get(LIVE_KEY) is True,
        prediction=prediction,
    )


# --- predict first, then reveal -------------------------------------------------------


@dataclass(frozen=True)
class PredictState:
    """Whether the parts of a lesson that give the answer away are open, and why.

    Open once the learner predicted (the top form, sent without JavaScript as
    ``?prediction=``, or a run that kept its ``_prediction``) or asked to see them
    (``?reveal=1``). ``context`` says whose parameters the question is about.
    """

    revealed: bool
    value: float | None
    error: str
    context: str

    @property
    def value_text(self) -> str:
        return figure_text(self.value) if self.value is not None else ""


def params_context(lab: Lab[Any], values: dict[str, Any]) -> str:
    """Say which parameters a prediction is for: the defaults, or the changed ones."""
    changed = [
        f"{param.name}={param.text(values[param.name])}"
        for param in lab.params
        if param.name in values and values[param.name] != param.default
    ]
    if not changed:
        return "With the defaults (the lesson's run):"
    return (
        f"With your parameters ({', '.join(changed)}), not the defaults the "
        "question describes:"
    )


def predict_state(
    *, lab: Lab[Any], query: dict[str, str], stored: dict[str, Any] | None
) -> PredictState:
    """Read the reveal state of a lesson page from its query and the run shown."""
    run_params = stored or {}
    value = _stored_prediction(run_params)
    error = ""
    raw = query.get("prediction", "").strip()
    if raw:
        guess = prediction_parse(raw)
        if guess is None:
            error = PREDICTION_ERROR
        else:
            value = guess
    revealed = value is not None or bool(query.get("reveal"))
    context = params_context(lab, run_params)
    return PredictState(revealed, value, error, context)

"""What a lesson page must hold, checked: ``manage.py lesson_check`` and the tests.

Each check returns readable problems instead of raising, so an author sees all of them
at once. The rules are those of ``course/AUTHORING.md`` and issue #11: enough prose,
sections ending in a summary, a diagram, the published tables with every column
explained, a prediction that names a number, a note per parameter, code references that
resolve, links that reverse, three to five questions.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ElementTree

from django.urls import NoReverseMatch, reverse

from course.challenges.problems import challenge_problems
from course.labs.harness.base import Tables
from course.labs.registry import lab_get
from course.lessons import Lesson
from course.sourcecode import RefError, ref_resolve
from course.textbook import (
    DIAGRAM_DIR,
    MIN_WORDS,
    LessonText,
    LessonTextError,
    cell_text,
    default_tables,
    lesson_text,
    table_cell,
)

_HELD = re.compile(r"<details class=\"answer-hold\"[^>]*>.*?</details>", re.DOTALL)
_SHOWN_BLOCK = re.compile(
    r'<figure class="(published-table|diagram)" data-(?:table|diagram)="([^"]+)">'
    r".*?</figure>",
    re.DOTALL,
)
_TAG = re.compile(r"<[^>]+>")
_CONTEXT = 40


def _structure(text: LessonText) -> list[str]:
    problems: list[str] = []
    if text.words < MIN_WORDS:
        problems.append(
            f"{text.words} words of prose; a lesson has at least {MIN_WORDS}"
        )
    sections = [h for h in text.toc if h.level == 2]
    if len(sections) < 4:
        problems.append(
            f"{len(sections)} sections (## headings); a lesson has at least 4"
        )
    if not sections or sections[-1].text.strip().lower() != "summary":
        problems.append("the last ## section must be 'Summary'")
    if not text.figures:
        problems.append("no [[diagram:NAME]]: a lesson has at least one diagram")
    for figure in text.figures:
        if not figure.title or not figure.desc:
            problems.append(f"diagram {figure.name}: needs <title> and <desc>")
    return problems


def _tables(text: LessonText, tables: Tables) -> list[str]:
    problems: list[str] = []
    if tables and not text.tables:
        problems.append("no [[table:NAME]]: show the course's published table(s)")
    for name in text.tables:
        notes = text.columns.get(name, {})
        for column in tables[name]["columns"]:
            if not notes.get(column):
                problems.append(f"[columns.{name}] has no sentence for {column!r}")
    predict = text.predict
    if predict is None:
        if tables:
            problems.append("no [predict]: the learner predicts one figure before Run")
        return problems
    if not predict.prompt:
        problems.append("[predict] has no prompt")
    try:
        cell = table_cell(tables, predict.table, predict.row, predict.column)
    except KeyError as error:
        problems.append(f"[predict]: {error.args[0]}")
    else:
        if isinstance(cell, bool) or not isinstance(cell, int | float):
            problems.append(f"[predict] names {cell!r}, not a number")
    return problems


def number_pattern(value: str) -> re.Pattern[str]:
    """Match ``value`` as a whole number of the text: not inside 1,000, 0.4 or v3."""
    return re.compile(r"(?<![\w.,])" + re.escape(value) + r"(?![\w]|[.,]\d)")


_QUOTES = str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"")


def _plain(fragment: str) -> str:
    """Return a fragment's text as one line, the typographer's quotes straightened."""
    text = html.unescape(_TAG.sub(" ", fragment)).translate(_QUOTES)
    return " ".join(text.split())


def _svg_text(name: str) -> str:
    try:
        root = ElementTree.parse(DIAGRAM_DIR / f"{name}.svg").getroot()
    except (OSError, ElementTree.ParseError):
        return ""
    return " ".join(" ".join(root.itertext()).split())


def visible_before_prediction(text: LessonText) -> list[tuple[str, str]]:
    """Return (where, plain text) of everything a learner can read before predicting.

    The lesson body without its held-back blocks, each shown table and diagram (the
    diagram's own text, caption and description), the questions (not their
    answers, which open on demand) and the code and link notes. The prompt is left
    out: it states the settings the question is about.
    """
    body = _HELD.sub(" ", text.html)
    parts: list[tuple[str, str]] = []

    def block(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "published-table":
            parts.append((f"table:{name}", _plain(match.group(0))))
        else:
            parts.append((f"diagram:{name}", _plain(_svg_text(name))))
        return " "

    prose = _SHOWN_BLOCK.sub(block, body)
    parts.insert(0, ("prose", _plain(prose)))
    notes = [(f"question {n}", q.question) for n, q in enumerate(text.questions, 1)]
    notes += [(f"[[code]] {link.ref}", link.text) for link in text.code]
    notes += [(f"[[see]] {see.label}", see.text) for see in text.see]
    parts += [(where, _plain(note)) for where, note in notes]
    return parts


def prediction_giveaways(text: LessonText, tables: Tables) -> list[str]:
    """The predicted figure, printed as the page prints it, must not show before the
    learner predicts: outside "::: answer" blocks and the blocks ``reveals`` holds."""
    predict = text.predict
    if predict is None:
        return []
    try:
        value = cell_text(
            table_cell(tables, predict.table, predict.row, predict.column)
        )
    except KeyError:
        return []  # reported by _tables
    pattern = number_pattern(value)
    problems: list[str] = []
    phrases = [
        u for u in predict.unrelated if not re.fullmatch(r"(table|diagram):.+", u)
    ]
    used: set[str] = set()
    for where, plain in visible_before_prediction(text):
        if where == f"table:{predict.table}":
            problems.append(
                f"[predict]: the table {predict.table!r} holds the answer and shows "
                "before the prediction; put it in [predict] reveals or a ::: answer"
            )
            continue
        if where in predict.unrelated:
            used.add(where)
            continue
        for phrase in phrases:
            if phrase in plain:
                used.add(phrase)
                plain = plain.replace(phrase, " ")
        for match in pattern.finditer(plain):
            start, end = match.start() - _CONTEXT, match.end() + _CONTEXT
            context = plain[max(0, start) : end]
            problems.append(
                f"[predict]: the answer {value} shows before the prediction in "
                f"{where}: \u2026{context}\u2026 (hold it back with ::: answer or "
                "reveals, or list the phrase in [predict] unrelated)"
            )
    problems += [
        f"[predict] unrelated {phrase!r}: not in the text shown before the prediction"
        for phrase in predict.unrelated
        if phrase not in used and _plain(phrase) not in used
    ]
    return problems


def _breakdown(text: LessonText, tables: Tables) -> list[str]:
    predict = text.predict
    if predict is None or predict.breakdown is None:
        return []
    parts = predict.breakdown
    problems = [] if parts.text else ["[predict.breakdown] has no text"]
    if not parts.columns:
        problems.append("[predict.breakdown] names no columns")
    for column in parts.columns:
        try:
            table_cell(tables, parts.table, parts.row, column)
        except KeyError as error:
            problems.append(f"[predict.breakdown]: {error.args[0]}")
    return problems


def _live_notes(text: LessonText, slug: str, tables: Tables) -> list[str]:
    """[live.columns.NAME] pairs with a model table NAME (the live one is live_NAME).

    The live table's columns are only known once the live part has run, so a note
    for a column it lacks is simply not shown; the live tests pin the columns.
    """
    named = {**text.live_columns, **text.live_compare}
    problems = [
        f"[live.*.{name}]: the model has no table {name!r} to pair with"
        for name in named
        if name not in tables
    ]
    for name, pairs in text.live_compare.items():
        columns = tables[name]["columns"] if name in tables else []
        problems += [
            f"[live.compare.{name}] {live!r}: the model's {name} has no {model!r}"
            for live, model in pairs.items()
            if model not in columns
        ]
    return problems


def _params(text: LessonText, slug: str) -> list[str]:
    lab = lab_get(slug)
    names = {param.name for param in lab.params}
    problems = [
        f"[params] has no note for {n!r}"
        for n in sorted(names)
        if not text.params.get(n)
    ]
    problems += [
        f"[params] names {n!r}, not a parameter"
        for n in sorted(set(text.params) - names)
    ]
    if lab.live is not None and not text.live:
        problems.append("[live] text is missing: say what the live part measures")
    return problems


def _links(text: LessonText) -> list[str]:
    problems: list[str] = []
    if not 2 <= len(text.code) <= 6:
        problems.append(f"{len(text.code)} [[code]] references; give 2 to 6")
    for link in text.code:
        if not link.text:
            problems.append(f"[[code]] {link.ref}: no text")
        try:
            ref_resolve(link.ref)
        except (RefError, ImportError) as error:
            problems.append(f"[[code]] {error}")
    if not 1 <= len(text.see) <= 4:
        problems.append(f"{len(text.see)} [[see]] links; give 1 to 4")
    for see in text.see:
        try:
            reverse(see.url, args=list(see.args))
        except NoReverseMatch:
            problems.append(f"[[see]] {see.url} {list(see.args)}: does not reverse")
        if not see.label:
            problems.append(f"[[see]] {see.url}: no label")
    return problems


def _questions(text: LessonText) -> list[str]:
    problems: list[str] = []
    if not 3 <= len(text.questions) <= 5:
        problems.append(f"{len(text.questions)} [[questions]]; give 3 to 5")
    for number, question in enumerate(text.questions, start=1):
        if not (question.question and question.answer and question.explanation):
            problems.append(
                f"question {number}: needs question, answer and explanation"
            )
    return problems


def lesson_problems(lesson: Lesson) -> list[str]:
    """Return every way the lesson's page falls short of the rules, or []."""
    try:
        text = lesson_text(lesson.slug)
    except LessonTextError as error:
        return [str(error)]
    if text is None:
        return [f"no course/content/{lesson.slug}.md"]
    tables = default_tables(lesson.slug)
    return [
        *text.problems,
        *_structure(text),
        *_tables(text, tables),
        *prediction_giveaways(text, tables),
        *_breakdown(text, tables),
        *_live_notes(text, lesson.slug, tables),
        *_params(text, lesson.slug),
        *_links(text),
        *_questions(text),
        *challenge_problems(lesson.slug, text),
    ]

"""What a lesson page must hold, checked: ``manage.py lesson_check`` and the tests.

Each check returns readable problems instead of raising, so an author sees all of them
at once. The rules are those of ``course/AUTHORING.md`` and issue #11: enough prose,
sections ending in a summary, a diagram, the published tables with every column
explained, a prediction that names a number, a note per parameter, code references that
resolve, links that reverse, three to five questions.
"""

from __future__ import annotations

from django.urls import NoReverseMatch, reverse

from course.labs.harness.base import Tables
from course.labs.registry import lab_find
from course.lessons import Lesson
from course.sourcecode import RefError, ref_resolve
from course.textbook import (
    MIN_WORDS,
    LessonText,
    LessonTextError,
    default_tables,
    lesson_text,
    table_cell,
)


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


def _params(text: LessonText, slug: str) -> list[str]:
    lab = lab_find(slug)
    if lab is None:
        return []
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
        *_params(text, lesson.slug),
        *_links(text),
        *_questions(text),
    ]

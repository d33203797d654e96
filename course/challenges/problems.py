"""What ``lesson_check`` proves of every challenge of a lesson.

Its references resolve (parameters, tables, rows, columns, placeholders, lessons),
its reference answer (``solution`` or ``answer``) passes the checker and its wrong
one (``wrong``) fails, the form as it opens does not already pass, a ``minimise``
or ``maximise`` search stays small and finds the reference answer's objective, and
nothing a learner reads before solving prints the lesson's predicted figure or the
challenge's own answer.
"""

from __future__ import annotations

import re
from typing import Any

from course.challenges.checker import (
    COST_LIMIT,
    AnswerError,
    Verdict,
    number_target,
    run_context,
    search_best,
    search_choices,
    search_size,
)
from course.challenges.expr import CELL, ExprError, NoValue, evaluate
from course.challenges.grading import (
    ChallengeUnavailable,
    challenge_check,
    model_runner,
    params_fill,
)
from course.challenges.spec import SEARCH_LIMIT, Challenge, lesson_challenges
from course.labs.harness.base import Lab, LabError, Tables
from course.labs.registry import lab_get
from course.lessons import lesson_get
from course.policies import run_cost
from course.textbook import (
    LessonText,
    cell_text,
    default_tables,
    placeholders_fill,
    table_cell,
)

MIN_CHALLENGES = 2


def number_pattern(value: str) -> re.Pattern[str]:
    """``value`` as a whole number of a text (as ``lesson_checks`` matches it)."""
    return re.compile(r"(?<![\w.,])" + re.escape(value) + r"(?![\w]|[.,]\d)")


def _check(challenge: Challenge, answer: dict[str, str]) -> Verdict | str:
    try:
        return challenge_check(challenge, answer)
    except (AnswerError, ChallengeUnavailable) as error:
        return str(error)


def _references(challenge: Challenge, lab: Lab[Any]) -> list[str]:
    problems: list[str] = []
    names = {param.name for param in lab.params}
    for what, used in (
        ("change", set(challenge.change)),
        ("set", set(challenge.settings)),
        ("search", set(challenge.search)),
    ):
        problems += [f"{what} names {n!r}, not a parameter" for n in used - names]
    problems += [
        f"{n!r} is both set and changed"
        for n in set(challenge.change) & set(challenge.settings)
    ]
    if challenge.kind == "params":
        for what, answer in (
            ("solution", challenge.solution),
            ("wrong", challenge.wrong),
        ):
            if set(answer) != set(challenge.change):
                problems.append(
                    f"{what} must give exactly {', '.join(challenge.change)}"
                )
        problems += [
            f"search {n!r} is not a parameter the learner changes"
            for n in set(challenge.search) - set(challenge.change)
        ]
    try:
        base = lab.resolve(challenge.settings)
    except LabError as error:
        return [*problems, f"set: {error}"]
    context = run_context(lab, base, model_runner(lab))
    expressions = [*challenge.require]
    expressions += [e for e in (challenge.objective, challenge.value) if e is not None]
    for expression in expressions:
        unknown = expression.names - set(base)
        if unknown:
            problems.append(
                f"{expression.source!r} names {sorted(unknown)}, not parameters"
            )
            continue
        try:
            evaluate(expression, context)
        except NoValue:
            pass  # an empty cell in the base run: the answer's run may fill it
        except ExprError as error:
            problems.append(f"{expression.source!r}: {error}")
    for slug in challenge.lessons:
        if lesson_get(slug) is None:
            problems.append(f"lessons names {slug!r}, not a lesson")
    return problems


def _params_proof(challenge: Challenge, lab: Lab[Any]) -> list[str]:
    problems: list[str] = []
    right = _check(challenge, challenge.solution)
    if isinstance(right, str):
        problems.append(f"the solution cannot be checked: {right}")
    elif not right.solved:
        problems.append(
            f"the solution fails: {right.headline} {' '.join(right.details)}"
        )
    wrong = _check(challenge, challenge.wrong)
    if isinstance(wrong, str):
        problems.append(f"the wrong answer cannot be checked: {wrong}")
    elif wrong.solved:
        problems.append("the wrong answer passes: the checker refuses nothing")
    base = (
        lab.resolve(challenge.settings) if not _settings_refused(challenge, lab) else {}
    )
    opened = {
        name: lab.param(name).text(base[name])
        for name in challenge.change
        if name in base
    }
    if len(opened) == len(challenge.change):
        as_opened = _check(challenge, opened)
        if isinstance(as_opened, Verdict) and as_opened.solved:
            problems.append(
                "the form as it opens ("
                + ", ".join(f"{k}={v}" for k, v in opened.items())
                + ") already passes: the learner must change something"
            )
    if challenge.direction:
        size = search_size(challenge)
        if size > SEARCH_LIMIT:
            problems.append(f"search covers {size} runs; at most {SEARCH_LIMIT}")
            return problems
        costly = [
            choice
            for choice in search_choices(challenge)
            if not _affordable(challenge, lab, choice)
        ]
        if costly:
            problems.append(f"search: {costly[0]} costs more than {COST_LIMIT:g} runs")
        best = search_best(challenge, lab, model_runner(lab))
        if best is None:
            problems.append("no choice of the search reaches the goal")
    return problems


def _settings_refused(challenge: Challenge, lab: Lab[Any]) -> bool:
    try:
        lab.resolve(challenge.settings)
    except LabError:
        return True
    return False


def _affordable(challenge: Challenge, lab: Lab[Any], choice: dict[str, str]) -> bool:
    try:
        params = lab.resolve({**challenge.settings, **choice})
    except LabError:
        return True
    return run_cost(lab, params) <= COST_LIMIT


def _number_proof(challenge: Challenge, lab: Lab[Any]) -> list[str]:
    problems: list[str] = []
    assert challenge.answer is not None
    assert challenge.wrong_answer is not None
    for what, number, solved in (
        ("answer", challenge.answer, True),
        ("wrong", challenge.wrong_answer, False),
    ):
        verdict = _check(challenge, {"answer": repr(number)})
        if isinstance(verdict, str):
            problems.append(f"{what} cannot be checked: {verdict}")
        elif verdict.solved != solved:
            problems.append(
                f"{what} = {number:g} "
                + ("fails" if solved else "passes: the checker refuses nothing")
            )
    value = challenge.value
    if value is not None and not challenge.settings and CELL.fullmatch(value.source):
        problems.append(
            "the answer is a cell of the lesson's own run: the learner would read it "
            "off the page; ask for a figure at other settings, or one worked out"
        )
    return problems


def _predicted(text: LessonText | None, tables: Tables) -> str:
    if text is None or text.predict is None:
        return ""
    try:
        predict = text.predict
        return cell_text(table_cell(tables, predict.table, predict.row, predict.column))
    except KeyError:
        return ""


def _texts(
    challenge: Challenge, lab: Lab[Any], tables: Tables
) -> tuple[list[str], list[tuple[str, str]]]:
    """Fill every text of the challenge; return the problems and what a learner
    reads before solving (where, text)."""
    problems: list[str] = []
    shown: list[tuple[str, str]] = []
    parts = [("title", challenge.title), ("goal", challenge.goal)]
    parts += [(f"hint {n}", hint) for n, hint in enumerate(challenge.hints, 1)]
    for where, raw in parts:
        found: list[str] = []
        filled = placeholders_fill(raw, tables, lab, found)
        problems += [f"{where}: {p}" for p in found]
        shown.append((where, filled))
    found = []
    placeholders_fill(challenge.debrief, tables, lab, found)
    problems += [f"debrief: {p}" for p in found]
    # The explanation is filled from the run checked: the challenge's own run for a
    # number, a learner's for parameters (the solution's stands in for them here).
    answer = challenge.solution if challenge.kind == "params" else {}
    try:
        run = lab.resolve({**challenge.settings, **answer})
    except LabError:
        run = lab.defaults()
    found = []
    filled = placeholders_fill(
        params_fill(challenge.explain, lab, run), model_runner(lab)(run), lab, found
    )
    problems += [f"explain: {p}" for p in found]
    if challenge.kind == "number" and challenge.explain:
        shown.append(("explain", filled))
    if not challenge.debrief:
        problems.append("no debrief: say why the answer works once it is found")
    return problems, shown


def _giveaways(
    challenge: Challenge, lab: Lab[Any], shown: list[tuple[str, str]], predicted: str
) -> list[str]:
    problems: list[str] = []
    figures = []
    if predicted:
        figures.append(("the lesson's predicted figure", predicted))
    if challenge.kind == "number" and challenge.value is not None:
        try:
            target = number_target(challenge, lab, model_runner(lab))
        except (ExprError, LabError):
            target = None
        if target is not None:
            figures.append(("the challenge's answer", cell_text(_whole(target))))
    for label, figure in figures:
        pattern = number_pattern(figure)
        problems += [
            f"{where} prints {label} ({figure}) before the learner answers"
            for where, text in shown
            if pattern.search(text)
        ]
    return problems


def _whole(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def challenge_problems(slug: str, text: LessonText | None) -> list[str]:
    """Return every problem of the lesson's challenges ([] when all are proven)."""
    lab = lab_get(slug)
    challenges = lesson_challenges(slug)
    if lab is None:
        return [
            f"[[challenges]]: {slug} has no lab to check them" for _ in challenges[:1]
        ]
    problems: list[str] = []
    if len(challenges) < MIN_CHALLENGES:
        problems.append(
            f"{len(challenges)} [[challenges]]; give at least {MIN_CHALLENGES}"
        )
    tables = default_tables(slug)
    predicted = _predicted(text, tables)
    for challenge in challenges:
        found = list(challenge.problems)
        if not found:
            found += _references(challenge, lab)
        if not found:
            proof = (
                _number_proof(challenge, lab)
                if challenge.kind == "number"
                else _params_proof(challenge, lab)
            )
            found += proof
        text_problems, shown = _texts(challenge, lab, tables)
        found += text_problems
        found += _giveaways(challenge, lab, shown, predicted)
        prefix = f"[[challenges]] {challenge.id}: "
        problems += [p if p.startswith("[[challenges]]") else prefix + p for p in found]
    return problems

"""What ``lesson_check`` proves of every challenge of a lesson.

Its references resolve (parameters, tables, rows, columns, placeholders, lessons),
its reference answer (``solution`` or ``answer``) passes the checker and its wrong
one (``wrong``) fails, the form as it opens does not already pass, a ``minimise``
or ``maximise`` search stays small and finds the reference answer's objective, and
nothing a learner reads before solving prints the lesson's predicted figure or the
challenge's own answer. Its ``live`` conditions are proven on the recorded live
runs of the solution and the wrong answer (``course.challenges.recorded``).
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
from course.challenges.expr import CELL, Context, ExprError, NoValue, evaluate
from course.challenges.grading import (
    ChallengeUnavailable,
    challenge_check,
    model_runner,
    params_fill,
)
from course.challenges.live import live_context, live_verdict
from course.challenges.recorded import RecordedRun, Recording, recordings_of
from course.challenges.spec import SEARCH_LIMIT, Challenge, lesson_challenges
from course.labs.harness.base import Lab, LabError, Tables
from course.labs.registry import lab_get
from course.lessons import lesson_get
from course.policies import run_cost
from course.textbook import (
    LessonText,
    cell_text,
    default_tables,
    model_tables,
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


def _recorded_context(
    challenge: Challenge, lab: Lab[Any], answer: dict[str, str], run: RecordedRun
) -> Context | str:
    """Return a recorded run as a live check reads it (the model's tables for its
    parameters beside the recorded live ones), or why it cannot stand for
    ``answer`` any more."""
    try:
        params = lab.resolve({**challenge.settings, **answer})
        recorded = lab.validate(run.params)
    except LabError as error:
        return str(error)
    if recorded != params:
        return "its parameters are not the answer's any more"
    if reason := lab.live_refusal(params):
        return f"the live part refuses it: {reason}"
    tables = {**model_tables(lab, params), **run.tables}
    return live_context(lab, params, tables, model_runner(lab))


def _live_proof(challenge: Challenge, lab: Lab[Any]) -> list[str]:
    """The live conditions name what a real live run produced, hold on the recorded
    run of the solution and fail on the recorded run of the wrong answer."""
    again = f"record it again: manage.py challenge_live_record {challenge.slug}"
    try:
        recording: Recording | None = recordings_of(challenge.slug).get(challenge.id)
    except ValueError as error:
        return [f"live: the recorded runs do not read: {error}"]
    if recording is None:
        return [f"live: no recorded live run; {again} {challenge.id}"]
    problems: list[str] = []
    for what, answer, run in (
        ("solution", challenge.solution, recording.solution),
        ("wrong", challenge.wrong, recording.wrong),
    ):
        context = _recorded_context(challenge, lab, answer, run)
        if isinstance(context, str):
            problems.append(f"live: the recorded run of the {what}: {context}; {again}")
            continue
        if what == "solution":
            problems += _live_references(challenge, lab, context)
            if problems:
                return problems
        verdict = live_verdict(challenge, context)
        if what == "solution" and not verdict.confirmed:
            missed = [c.said for c in verdict.conditions if not c.held]
            problems.append(
                "live: the recorded run of the solution misses: " + "; ".join(missed)
            )
        if what == "wrong" and verdict.confirmed:
            problems.append(
                "live: the recorded run of the wrong answer meets every live "
                "condition: the live check refuses nothing"
            )
    return problems


def _live_references(
    challenge: Challenge, lab: Lab[Any], context: Context
) -> list[str]:
    problems: list[str] = []
    for condition in challenge.live:
        try:
            evaluate(condition, context)
        except NoValue:
            pass  # an empty cell: reported as a miss by the verdict
        except ExprError as error:
            problems.append(f"live {condition.source!r}: {error}")
    found: list[str] = []
    placeholders_fill(
        params_fill(challenge.live_explain, lab, context.params),
        context.tables,
        lab,
        found,
    )
    problems += [f"live_explain: {p}" for p in found]
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
            if challenge.live_checked:
                found += _live_proof(challenge, lab)
        text_problems, shown = _texts(challenge, lab, tables)
        found += text_problems
        found += _giveaways(challenge, lab, shown, predicted)
        prefix = f"[[challenges]] {challenge.id}: "
        problems += [p if p.startswith("[[challenges]]") else prefix + p for p in found]
    return problems

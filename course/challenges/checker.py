"""Checking a learner's answer to a challenge against the lab's model: pure.

Every function takes the model as ``runner`` (parameters in, tables out), so the
tests give it tables of their own and nothing here reads a file or a database;
``course.challenges.grading`` passes the cached model (``textbook.model_tables``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from course.challenges.expr import (
    Context,
    ExprError,
    NoValue,
    Parsed,
    describe,
    evaluate,
    number_text,
)
from course.challenges.spec import Challenge
from course.labs.harness.base import Lab, LabError, Params, Tables
from course.policies import run_cost

Runner = Callable[[Params], Tables]
# A challenge's run may cost at most this many runs of the lab with its defaults:
# the model runs in the request, so a challenge is never a way around the queue.
COST_LIMIT = 4.0


class AnswerError(Exception):
    """An answer that cannot be checked (not a number, a parameter out of range…);
    the message says why, in one line a learner can act on."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of one answer: solved or not, and the model's figures saying why."""

    solved: bool
    headline: str
    details: tuple[str, ...] = ()
    # The answer as it was checked: parameter values as text, or {"answer": "12"}.
    answer: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Best:
    """The best objective any choice of a challenge's search reaches, and one such."""

    value: float
    choice: Mapping[str, str]


# --- the learner's parameters --------------------------------------------------------


def challenge_params(
    challenge: Challenge, lab: Lab[Any], submitted: Mapping[str, str]
) -> Params:
    """Return the run a params answer asks for: the lab's defaults, the challenge's
    settings, and the learner's values of the parameters it lets them change.

    Raise AnswerError for a parameter the challenge keeps fixed, a missing value, a
    value the lab refuses, or a run too heavy to check in a request.
    """
    names = {param.name for param in lab.params}
    fixed = sorted(set(submitted) & names - set(challenge.change))
    if fixed:
        raise AnswerError(
            f"{', '.join(fixed)} stays as it is in this challenge; "
            f"you may change only {', '.join(challenge.change)}"
        )
    overrides = dict(challenge.settings)
    for name in challenge.change:
        text = submitted.get(name, "").strip()
        if not text:
            raise AnswerError(f"give a value for {name}")
        overrides[name] = text
    try:
        params = lab.resolve(overrides)
    except LabError as error:
        raise AnswerError(str(error)) from None
    cost = run_cost(lab, params)
    if cost > COST_LIMIT:
        raise AnswerError(
            f"that run would cost about {cost:g} times the lesson's own run; a "
            f"challenge checks runs up to {COST_LIMIT:g} times: choose smaller values"
        )
    return params


def model_rerun(
    lab: Lab[Any] | None, params: Params, runner: Runner
) -> Callable[[Mapping[str, str]], Tables]:
    """Return how a cell written ``cell@name=value`` is read: from the model run
    with those parameters changed from ``params``."""

    def rerun(changes: Mapping[str, str]) -> Tables:
        if lab is None:
            raise ExprError("the lesson has no lab to run again")
        try:
            values = dict(params)
            for name, text in changes.items():
                values[name] = lab.param(name).parse(text)
            return runner(lab.validate(values))
        except LabError as error:
            raise ExprError(str(error)) from None

    return rerun


def run_context(lab: Lab[Any] | None, params: Params, runner: Runner) -> Context:
    """Return one run of the model as expressions see it, able to run again with
    some parameters changed (``cell@name=value``)."""
    return Context(params, runner(params), model_rerun(lab, params, runner))


def condition_holds(condition: Parsed, context: Context) -> bool:
    """Return whether ``condition`` holds on the run (an empty cell: it does not)."""
    try:
        return bool(evaluate(condition, context))
    except NoValue:
        return False


def _objective(challenge: Challenge, context: Context) -> float:
    assert challenge.objective is not None
    value = evaluate(challenge.objective, context)
    if isinstance(value, list):  # a one-value list parameter: its value
        value = sum(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExprError(f"{challenge.objective.source!r} is not a number")
    return float(value)


def _better(direction: str, value: float, than: float) -> bool:
    margin = 1e-9 * max(1.0, abs(than))
    return value < than - margin if direction == "min" else value > than + margin


def params_verdict(
    challenge: Challenge,
    lab: Lab[Any],
    params: Params,
    runner: Runner,
    best: Callable[[], Best | None],
    *,
    explain: Callable[[Tables], str] = lambda tables: "",
) -> Verdict:
    """Run the model with ``params`` and say whether they reach the goal.

    With ``minimise``/``maximise`` the answer must also be the best: no choice of the
    challenge's search (``best``, worked out once) may do better and still hold.
    """
    answer = {name: _param_text(params[name]) for name in challenge.change}
    context = run_context(lab, params, runner)
    failed = [
        describe(condition, context)
        for condition in challenge.require
        if not condition_holds(condition, context)
    ]
    note = explain(context.tables)
    if failed:
        details = tuple(failed) + ((note,) if note else ())
        return Verdict(False, _missed_headline(answer), details, answer)
    if challenge.direction:
        found = best()
        mine = _objective(challenge, context)
        if found is not None and _better(challenge.direction, found.value, mine):
            assert challenge.objective is not None
            word = "lower" if challenge.direction == "min" else "higher"
            return Verdict(
                False,
                "Your choice reaches the goal, but it is not the best one.",
                (
                    f"{challenge.objective.source} is {number_text(mine)} with your "
                    f"choice; another choice reaches the goal with it {word}.",
                ),
                answer,
            )
    return Verdict(True, "Solved: your choice reaches the goal.", (), answer)


def _missed_headline(answer: Mapping[str, str]) -> str:
    chosen = ", ".join(f"{name}={value}" for name, value in answer.items())
    return f"Not yet: with {chosen} the model misses the goal."


def _param_text(value: object) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "none"
    return number_text(value).replace(",", "") if not isinstance(value, str) else value


def search_choices(challenge: Challenge) -> Iterator[dict[str, str]]:
    """Every choice the search of a challenge covers, as parameter texts."""
    names = list(challenge.search)
    for values in itertools.product(*(challenge.search[name] for name in names)):
        yield dict(zip(names, values, strict=True))


def search_size(challenge: Challenge) -> int:
    return math.prod(len(values) for values in challenge.search.values())


def search_best(challenge: Challenge, lab: Lab[Any], runner: Runner) -> Best | None:
    """Run every choice of the search; return the best objective among those that
    reach the goal (None when none does). Choices the lab refuses are skipped."""
    if challenge.objective is None:
        return None
    best: Best | None = None
    for choice in search_choices(challenge):
        try:
            params = lab.resolve({**challenge.settings, **choice})
        except LabError:
            continue
        # Conditions on the parameters alone rule a choice out without a run.
        bare = Context(params, {})
        if not all(condition_holds(c, bare) for c in challenge.require if not c.cells):
            continue
        context = run_context(lab, params, runner)
        if not all(
            condition_holds(condition, context) for condition in challenge.require
        ):
            continue
        value = _objective(challenge, context)
        if best is None or _better(challenge.direction, value, best.value):
            best = Best(value, choice)
    return best


# --- a number ------------------------------------------------------------------------


def number_parse(text: str) -> float:
    """Return a learner's number ("1,200", "8.5 %" too); raise AnswerError."""
    cleaned = text.replace(",", "").strip().rstrip("%").strip()
    try:
        number = float(cleaned)
    except ValueError:
        raise AnswerError("answer with a number, like 12 or 8.5") from None
    if not math.isfinite(number) or abs(number) >= 1e15:
        raise AnswerError("answer with a number, like 12 or 8.5")
    return number


def number_target(challenge: Challenge, lab: Lab[Any] | None, runner: Runner) -> float:
    """Return the figure a number challenge's answer is compared with."""
    assert challenge.value is not None
    params = lab.resolve(challenge.settings) if lab is not None else {}
    value = evaluate(challenge.value, run_context(lab, params, runner))
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExprError(f"{challenge.value.source!r} is not a number")
    return float(value)


def tolerance_of(challenge: Challenge, target: float) -> float:
    return max(challenge.tolerance, abs(target) * challenge.tolerance_pct / 100)


def number_verdict(
    challenge: Challenge, answer: float, target: float, *, explain: str = ""
) -> Verdict:
    """Compare a number with the model's figure, within the challenge's tolerance."""
    given = {"answer": number_text(answer).replace(",", "")}
    if abs(answer - target) <= tolerance_of(challenge, target) + 1e-9:
        return Verdict(True, "Solved: that is the model's figure.", (), given)
    direction = "high" if answer > target else "low"
    details = (explain,) if explain else ()
    unit = f" {challenge.unit}" if challenge.unit else ""
    return Verdict(
        False,
        f"Not yet: {number_text(answer)}{unit} is too {direction}.",
        details,
        given,
    )

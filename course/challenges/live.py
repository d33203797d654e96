"""A solved answer checked on the live system: a live run's tables against the
challenge's ``live`` conditions. Pure.

A params challenge may list ``live`` conditions (``course/AUTHORING.md``,
"Challenges"): what a live run of the learner's solved answer must show. The run
goes through the lab service as any live run does; once it has finished, its
tables (the model's and the live part's, as the run stored them) are read here.
Nothing here reads a file or a database: the caller passes the tables and the
model as ``runner``, which answers the cells written ``cell@name=value`` (the
model's figure at other settings, a reference the live figure is held to).

The verdict never solves or unsolves a challenge: solving stays the model's word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from course.challenges.checker import Runner, condition_holds, model_rerun
from course.challenges.expr import Context, ExprError, Parsed, describe
from course.challenges.spec import Challenge
from course.labs.harness.base import Lab, Params, Tables


@dataclass(frozen=True)
class LiveCondition:
    """One live condition on one run: whether it held, and the figures it read."""

    source: str
    held: bool
    # What it came to, for a learner: "live_x[a].b is 548; the goal needs it ≤ 575".
    said: str


@dataclass(frozen=True)
class LiveVerdict:
    """What a live run of a solved answer showed, condition by condition."""

    conditions: tuple[LiveCondition, ...]

    @property
    def confirmed(self) -> bool:
        return bool(self.conditions) and all(c.held for c in self.conditions)

    @property
    def held(self) -> int:
        return sum(1 for condition in self.conditions if condition.held)

    @property
    def headline(self) -> str:
        if self.confirmed:
            return "Confirmed on the live system: every live condition held."
        total = len(self.conditions)
        return (
            f"Not confirmed: {self.held} of {total} live condition"
            f"{'' if total == 1 else 's'} held on this run."
        )


def live_context(
    lab: Lab[Any], params: Params, tables: Tables, runner: Runner
) -> Context:
    """Return a finished run as expressions see it: its own tables (model and
    live), its parameters, and the model for cells at other settings."""
    return Context(params, tables, model_rerun(lab, params, runner))


def _holds(condition: Parsed, context: Context) -> bool:
    # A table the run lacks (a live part that changed its tables) is a condition
    # that did not hold, said so by ``describe``: the page still shows the run.
    try:
        return condition_holds(condition, context)
    except ExprError:
        return False


def live_verdict(challenge: Challenge, context: Context) -> LiveVerdict:
    """Evaluate every live condition of ``challenge`` on one run."""
    return LiveVerdict(
        tuple(
            LiveCondition(
                condition.source,
                _holds(condition, context),
                describe(condition, context),
            )
            for condition in challenge.live
        )
    )


def run_tables(result: object) -> Tables:
    """Return the tables of a finished run's stored result ({} when it has none)."""
    if not isinstance(result, Mapping):
        return {}
    tables = result.get("tables")
    return dict(tables) if isinstance(tables, Mapping) else {}

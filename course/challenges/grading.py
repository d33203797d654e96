"""Grading an answer with the lab's model, and a challenge's texts filled in.

The model runs through ``course.textbook.model_tables``, so a run is made once per
parameter set and code version and then read from disk; the best choice of a
``minimise``/``maximise`` challenge is searched once per process and lesson file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from course.challenges.checker import (
    Best,
    Verdict,
    challenge_params,
    number_parse,
    number_target,
    number_verdict,
    params_verdict,
    search_best,
    tolerance_of,
)
from course.challenges.expr import ExprError, number_text
from course.challenges.live import LiveVerdict, live_context, live_verdict
from course.challenges.spec import Challenge, lesson_challenges, lesson_mtime
from course.labs.harness.base import Lab, LabError, Params, Tables
from course.labs.registry import lab_get
from course.policies import run_fingerprint
from course.textbook import default_tables, model_tables
from course.textbook import placeholders_fill as _fill


class ChallengeUnavailable(Exception):
    """The lesson's lab is gone or the challenge no longer checks (an author's bug)."""


def _lab(challenge: Challenge) -> Lab[Any]:
    lab = lab_get(challenge.slug)
    if lab is None:
        raise ChallengeUnavailable(f"{challenge.slug} has no lab")
    return lab


@dataclass(frozen=True)
class ModelRunner:
    """The lab's model as a checker's runner: its runs cached on disk."""

    lab: Lab[Any]

    def __call__(self, params: Params) -> Tables:
        return model_tables(self.lab, params)


def model_runner(lab: Lab[Any]) -> ModelRunner:
    return ModelRunner(lab)


_PARAM = re.compile(r"\{\{\s*param:([a-z0-9_]+)\s*\}\}")


def fill(text: str, tables: Tables, lab: Lab[Any], params: Params | None = None) -> str:
    """Fill a challenge text's placeholders from ``tables`` and, for
    ``{{param:x}}``, from ``params`` (the run checked) when given. Problems are
    dropped: ``lesson_check`` reports them."""
    if not text:
        return ""
    if params is not None:
        text = params_fill(text, lab, params)
    return _fill(text, tables, lab, [])


def params_fill(text: str, lab: Lab[Any], params: Params) -> str:
    """Put the values of ``params`` in for ``{{param:x}}`` (others left as they are)."""
    return _PARAM.sub(
        lambda m: (
            lab.param(m.group(1)).text(params[m.group(1)])
            if m.group(1) in params
            else m.group(0)
        ),
        text,
    )


_CODE = re.compile(r"`([^`]+)`")


def inline_html(text: str) -> SafeString:
    """Return a challenge text as HTML: escaped, `backticks` as <code>."""
    return mark_safe(_CODE.sub(r"<code>\1</code>", escape(text)))


_BEST: dict[str, Best | None] = {}


def _search_key(challenge: Challenge) -> str:
    """What the best answer depends on: the goal, the settings and the search."""
    return json.dumps(
        [
            challenge.slug,
            challenge.settings,
            [condition.source for condition in challenge.require],
            challenge.objective.source if challenge.objective else "",
            challenge.direction,
            challenge.search,
        ],
        sort_keys=True,
    )


def challenge_best(challenge: Challenge) -> Best | None:
    """Return the best choice of a minimise/maximise challenge, searched once per
    process (its runs are on disk after the first search)."""
    key = _search_key(challenge)
    if key not in _BEST:
        lab = _lab(challenge)
        _BEST[key] = search_best(challenge, lab, model_runner(lab))
    return _BEST[key]


def challenge_check(challenge: Challenge, submitted: Mapping[str, str]) -> Verdict:
    """Check one answer (the form's fields); raise AnswerError for one that cannot be
    checked, ChallengeUnavailable when the challenge itself is broken."""
    lab = _lab(challenge)
    runner = model_runner(lab)
    try:
        if challenge.kind == "number":
            answer = number_parse(submitted.get("answer", ""))
            target = number_target(challenge, lab, runner)
            own = lab.resolve(challenge.settings)
            explain = fill(challenge.explain, runner(own), lab, own)
            return number_verdict(challenge, answer, target, explain=explain)
        params = challenge_params(challenge, lab, submitted)
        return params_verdict(
            challenge,
            lab,
            params,
            runner,
            lambda: challenge_best(challenge),
            explain=lambda tables: fill(challenge.explain, tables, lab, params),
        )
    except (ExprError, LabError) as error:
        raise ChallengeUnavailable(str(error)) from None


def challenge_live_params(challenge: Challenge, answer: Mapping[str, str]) -> Params:
    """Return the run a live check of ``answer`` asks for: the parameters the
    model checked it with, as the lab service stores them. Raise AnswerError for an
    answer the model would not check (the lab changed since it was solved)."""
    lab = _lab(challenge)
    return lab.validate(challenge_params(challenge, lab, answer))


def live_fingerprint(challenge: Challenge, params: Params) -> str:
    """Return the fingerprint of a live run of ``params`` (``LabRun.fingerprint``)."""
    return run_fingerprint(challenge.slug, params, live=True)


@dataclass(frozen=True)
class LiveReading:
    """A finished live run read against a challenge: the verdict and its text."""

    verdict: LiveVerdict
    # ``live_explain`` filled from the run's own tables and parameters.
    explain: str


def challenge_live_read(
    challenge: Challenge, params: Params, tables: Tables
) -> LiveReading:
    """Evaluate the challenge's live conditions on a finished run's tables."""
    lab = _lab(challenge)
    context = live_context(lab, params, tables, model_runner(lab))
    return LiveReading(
        live_verdict(challenge, context),
        fill(challenge.live_explain, tables, lab, params),
    )


@dataclass(frozen=True)
class ChallengeText:
    """A challenge as the page shows it: texts filled, the form's fields."""

    challenge: Challenge
    # HTML: escaped, with `code` spans.
    goal: SafeString
    hints: tuple[SafeString, ...]
    debrief: SafeString
    # (name, value as typed, help) of each field: the parameters, or the answer.
    fields: tuple[tuple[str, str, str], ...]
    settings: tuple[tuple[str, str], ...]
    tolerance: str


def _tolerance_text(challenge: Challenge) -> str:
    if challenge.kind != "number":
        return ""
    if not challenge.tolerance and not challenge.tolerance_pct:
        return "exactly"
    if challenge.tolerance_pct:
        return f"within {number_text(challenge.tolerance_pct)} %"
    unit = f" {challenge.unit}" if challenge.unit else ""
    return f"within {number_text(challenge.tolerance)}{unit}"


def challenge_text(challenge: Challenge) -> ChallengeText:
    """Return what the page shows of ``challenge`` (the lesson's default tables)."""
    lab = lab_get(challenge.slug)
    tables = default_tables(challenge.slug)
    fields: list[tuple[str, str, str]] = []
    if challenge.kind == "number":
        fields.append(("answer", "", challenge.unit))
    elif lab is not None:
        try:
            base = lab.resolve(challenge.settings)
        except Exception:
            base = lab.defaults()
        for name in challenge.change:
            param = lab.param(name)
            fields.append((name, param.text(base[name]), param.help))
    return ChallengeText(
        challenge=challenge,
        goal=inline_html(fill(challenge.goal, tables, lab)),
        hints=tuple(inline_html(fill(hint, tables, lab)) for hint in challenge.hints),
        debrief=inline_html(fill(challenge.debrief, tables, lab)),
        fields=tuple(fields),
        settings=tuple(challenge.settings.items()),
        tolerance=_tolerance_text(challenge),
    )


@lru_cache(maxsize=64)
def _texts(slug: str, mtime_ns: int) -> tuple[ChallengeText, ...]:
    return tuple(challenge_text(c) for c in lesson_challenges(slug) if c.usable)


def lesson_challenge_texts(slug: str) -> tuple[ChallengeText, ...]:
    """Return the page's texts of every usable challenge of the lesson."""
    return _texts(slug, lesson_mtime(slug))


def target_text(challenge: Challenge) -> str:
    """The figure a number challenge wants and its tolerance, for a debrief."""
    lab = _lab(challenge)
    target = number_target(challenge, lab, model_runner(lab))
    tolerance = tolerance_of(challenge, target)
    unit = f" {challenge.unit}" if challenge.unit else ""
    shown = f"{number_text(target)}{unit}"
    return shown if not tolerance else f"{shown} (± {number_text(tolerance)})"

"""The explorable lesson page: a control for each lab parameter, and the model's
tables for any parameter set, answered as the learner moves a value.

A lesson page's lab form is a text field per parameter; ``static/js/explore.js``
turns each into a control that suits it (``controls_for``): a slider with its
number field for a bounded number, a stepper for a small count (or a seed), chips
for a list, a select for a text parameter with known choices. Moving one asks
``GET /course/<slug>/model.json`` (``course.views.course_lesson_model``) for the
model's tables with the form's values, parsed by the form's own rules
(``explore_params``), and the page redraws its tables and charts in place, the
figures that moved since the previous parameter set marked (``explore_moved``,
``course.compare``'s rule).

It is the model only, and costs little because a parameter set's tables are kept
(``course.textbook.model_tables_from``: this process, then the disk, per version of
the labs' code). Nothing is recorded: no run, no quota. What protects the web
process: a parameter set costlier than an anonymous run may be is refused without
an account (``explore_refusal``, the lab service's own rule), and a client address,
or a signed-in learner, may have ``LAB_EXPLORE_RUNS_PER_MINUTE`` sets run that
were not kept (``explore_serve``); kept ones are always answered. A set that is run
runs once however many ask for it at once, in a worker process beside the web
process (``course.model_pool``), so the pages it serves keep their interpreter lock.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.urls import reverse
from django.utils import timezone

from course.compare import tables_compared
from course.forms import LabForm
from course.labs.harness.base import Cell, Lab, Param, Params, Tables
from course.labs.harness.queueing import ARRIVALS
from course.labs.registry import LABS
from course.model_pool import model_pool_run, model_pool_warm
from course.policies import Refusal, Usage, quota_check, run_cost
from course.ratelimits import minute_take
from course.services.labqueue import Requester, requester_limits
from course.textbook import (
    MEMORY,
    RUN,
    model_cache_dir,
    model_key,
    model_key_valid,
    model_tables_from,
    model_tables_in_memory,
    model_tables_keep,
    model_tables_kept,
)

log = logging.getLogger(__name__)

ControlKind = Literal["slider", "stepper", "list", "select", "text"]

# Text parameters whose values are a fixed set: a select offers them. (A Param has
# no list of choices; the lab checks the value itself, e.g. queueing's ARRIVALS.)
STR_CHOICES: dict[str, tuple[str, ...]] = {"arrivals": tuple(ARRIVALS)}
# A whole number whose range spans at most this many steps is a stepper.
STEPPER_SPAN = 12
# A whole number this large is an identifier (a seed): a stepper, not a slider.
IDENTIFIER_FROM = 1_000_000
# A slider reaches this many times the default when the maximum is far beyond it.
SLIDER_REACH = 10
# About this many positions along a slider.
SLIDER_POSITIONS = 50
ANSWER_MAX_AGE_S = 300


# --- the controls -------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """How the page lets the learner move one parameter.

    ``minimum``/``maximum`` are what the parameter accepts (the number field takes
    all of it); ``low``/``high``/``step`` are the slider's sensible part.
    """

    name: str
    kind: ControlKind
    default: str
    integer: bool = False
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    low: float | None = None
    high: float | None = None
    step: float = 1
    choices: tuple[str, ...] = ()
    min_items: int = 0
    max_items: int = 0

    def as_json(self) -> dict[str, object]:
        raw = asdict(self)
        return {
            "name": raw["name"],
            "kind": raw["kind"],
            "default": raw["default"],
            "integer": raw["integer"],
            "minimum": raw["minimum"],
            "maximum": raw["maximum"],
            "exclusiveMinimum": raw["exclusive_minimum"],
            "low": raw["low"],
            "high": raw["high"],
            "step": raw["step"],
            "choices": list(self.choices),
            "minItems": raw["min_items"],
            "maxItems": raw["max_items"],
        }


def controls_for(lab: Lab[Any]) -> list[Control]:
    """Return one control per parameter of ``lab``, in the form's order."""
    return [control_of(param) for param in lab.params]


def control_of(param: Param) -> Control:
    """Choose the control that suits ``param``: its kind, default and range."""
    default = param.text(param.default)
    if param.kind == "int_list":
        return Control(
            param.name,
            "list",
            default,
            integer=True,
            minimum=param.minimum,
            maximum=param.maximum,
            min_items=param.min_items,
            max_items=param.max_items,
        )
    if param.kind == "str":
        choices = STR_CHOICES.get(param.name, ())
        kind: ControlKind = "select" if choices else "text"
        return Control(param.name, kind, default, choices=choices)
    return _number_control(param, default)


def _number_control(param: Param, default: str) -> Control:
    integer = param.kind == "int"
    value = float(param.default) if isinstance(param.default, int | float) else 0.0
    low, high = slider_range(param, value)
    stepper = integer and (high - low <= STEPPER_SPAN or abs(value) >= IDENTIFIER_FROM)
    # The slider's grid starts at 0 (a minimum of 1 or 100 would leave the round
    # values, the default among them, off it); the page keeps the value within the
    # parameter's range, so the first position of "1 … 2000" is 1.
    grid = 0.0 if low >= 0 else low
    step = 1.0 if stepper else slider_step(grid, high, value, integer=integer)
    if param.exclusive_minimum and grid == low:
        grid += step  # the minimum itself is refused: the slider starts a step above
    return Control(
        param.name,
        "stepper" if stepper else "slider",
        default,
        integer=integer,
        minimum=param.minimum,
        maximum=param.maximum,
        exclusive_minimum=param.exclusive_minimum,
        low=None if stepper else grid,
        high=None if stepper else high,
        step=step,
    )


def slider_range(param: Param, default: float) -> tuple[float, float]:
    """Return the part of the parameter's range a slider covers.

    From the minimum (or 0) to the maximum, or to ``SLIDER_REACH`` times the
    default when the maximum is far beyond it (a delay of 30 ms that may be an
    hour slides to 300 ms; the number field still takes the hour). A parameter
    the run's work grows with (``Param.work``) slides to what an anonymous run may
    cost (``LAB_ANON_COST_PER_RUN`` times the default), so sliding never asks for
    an account; a learner with one types more.
    """
    low = param.minimum if param.minimum is not None else min(0.0, default)
    times = settings.LAB_ANON_COST_PER_RUN if param.work == "value" else SLIDER_REACH
    reach = times * max(abs(default), 1.0)
    high = param.maximum if param.maximum is not None else reach
    high = min(high, max(reach, low + 1))
    return float(low), float(max(high, low + (1 if param.kind == "int" else 0.01)))


def slider_step(low: float, high: float, default: float, *, integer: bool) -> float:
    """Return a round step (1, 2 or 5 times a power of ten) giving about
    ``SLIDER_POSITIONS`` positions, on whose grid from ``low`` the default lies."""
    target = (high - low) / SLIDER_POSITIONS
    exponent = math.floor(math.log10(target)) if target > 0 else 0
    smallest = 0 if integer else -6
    for power in range(exponent, smallest - 1, -1):
        for factor in (5, 2, 1):
            step = factor * 10.0**power
            if step > target:
                continue
            ratio = (default - low) / step
            if abs(ratio - round(ratio)) < 1e-9:
                return float(round(step, 9))
    return 1.0 if integer else 10.0**smallest


def explore_config(lab: Lab[Any]) -> dict[str, object]:
    """Return what ``static/js/explore.js`` needs: where to ask and the controls.

    A lesson page is being shown: the model's worker processes start now, in the
    background, so the learner's first new set finds them ready.
    """
    if settings.LAB_EXPLORE_PROCESSES > 0:
        model_pool_warm(settings.LAB_EXPLORE_PROCESSES)
    return {
        "url": reverse("course-model", args=[lab.slug]),
        "controls": [control.as_json() for control in controls_for(lab)],
    }


# --- reading a parameter set --------------------------------------------------------


def explore_lab(slug: str) -> Lab[Any] | None:
    return LABS.get(slug)


def explore_params(
    lab: Lab[Any], query: Mapping[str, str]
) -> tuple[Params | None, dict[str, list[str]]]:
    """Parse the parameters as the lab form does; return them, or the field errors.

    A parameter left out (or empty) keeps its default, as in the form. Anything
    else in the query (the live switch, a prediction) is not the model's business.
    """
    data = {param.name: query.get(param.name, "") for param in lab.params}
    form = LabForm(lab, data=data)
    if form.is_valid():
        return form.params, {}
    return None, {
        name: [str(message) for message in messages]
        for name, messages in form.errors.items()
    }


def explore_free(lab: Lab[Any], params: Params) -> bool:
    """Whether anyone may explore ``params``, signed in or not: no larger than an
    anonymous run may be (then ``explore_refusal`` needs no user)."""
    return run_cost(lab, params) <= settings.LAB_ANON_COST_PER_RUN


def explore_refusal(
    lab: Lab[Any], params: Params, user: AbstractBaseUser | AnonymousUser
) -> Refusal | None:
    """Return why this parameter set may not be explored by ``user``, or None.

    The lab service's rule for the size of one run (``course.policies``): a set
    costlier than an anonymous run may be needs an account, and a learner's own
    per-run budget holds as for a queued run. Nothing is counted: a model answer
    is no run.
    """
    if explore_free(lab, params):
        return None  # the common case asks nothing of the session or the database
    cost = run_cost(lab, params)
    limits = requester_limits(Requester(visitor="", client="", user=user))
    return quota_check(
        limits=limits,
        usage=Usage(in_flight=0, address_in_flight=0, last_hour=()),
        cost=cost,
        live=False,
        now=timezone.now(),
        typical_run_s=1.0,
    )


def explore_since(raw: str) -> str:
    """Return the previous parameter set's key from a query ("" when it is none)."""
    return raw if model_key_valid(raw) else ""


def explore_etag(lab: Lab[Any], params: Params, since: str) -> str:
    """Return the answer's ETag: the labs' code, the parameter set and ``since``."""
    return f'"{model_cache_dir().name}-{model_key(lab, params)}-{since or "0"}"'


# --- answering ------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    key: str
    tables: Tables
    source: str  # course.textbook's MEMORY, DISK or RUN
    duration_ms: float


@dataclass(frozen=True)
class Throttled:
    """No answer now: ``status`` 429 (this minute's new sets are spent) or 503
    (the process's model runs are all taken); retry after ``retry_after_s``."""

    retry_after_s: int
    message: str
    status: int = 429


# How long a new set waits for one of the process's model runs, and when to retry.
RUN_WAIT_S = 10.0
BUSY_RETRY_S = 2
BUSY_TEXT = (
    "The model is busy with other learners' new parameter sets; this one runs in "
    "a moment."
)


def explore_serve(
    lab: Lab[Any], params: Params, *, who: Callable[[], str]
) -> Served | Throttled:
    """Return the model's tables for ``params``: kept ones at once; a set nobody
    asked for yet is run if ``who`` (called only then) has runs left this minute."""
    began = time.perf_counter()
    key = model_key(lab, params)
    kept = model_tables_kept(lab, key)
    if kept is None:
        retry = minute_take("explore", who(), settings.LAB_EXPLORE_RUNS_PER_MINUTE)
        if retry is not None:
            return Throttled(retry, _throttled_text(retry))
        with _single_flight(key):
            # Another request may have run the same set while this one waited.
            kept = model_tables_kept(lab, key) or _run(lab, params)
        if kept is None:
            return Throttled(BUSY_RETRY_S, BUSY_TEXT, status=503)
    tables, source = kept
    return Served(key, tables, source, (time.perf_counter() - began) * 1000)


def explore_served_from_memory(
    lab: Lab[Any], params: Params, *, began: float
) -> Served | None:
    """Return ``params``'s tables if this process keeps them in memory: no I/O, so
    an event loop may ask. ``began`` is when the request's clock started."""
    key = model_key(lab, params)
    tables = model_tables_in_memory(lab, key)
    if tables is None:
        return None
    return Served(key, tables, MEMORY, (time.perf_counter() - began) * 1000)


def _run(lab: Lab[Any], params: Params) -> tuple[Tables, str] | None:
    """Run the model; None when no run came free within ``RUN_WAIT_S``.

    A model run is CPU-bound Python: inside the web process it would hold the
    interpreter lock against every other request the process serves. So it runs
    in ``LAB_EXPLORE_PROCESSES`` worker processes (``course.model_pool``), or, with
    0, here, one at a time (``LAB_EXPLORE_RUNS_AT_ONCE``), so the pages and the
    kept sets keep answering between turns.
    """
    processes = settings.LAB_EXPLORE_PROCESSES
    if processes > 0:
        key = model_key(lab, params)
        tables = model_pool_run(
            lab.slug,
            params,
            processes=processes,
            timeout=RUN_WAIT_S,
            on_done=lambda done: model_tables_keep(lab, key, done),
        )
        if tables is None:
            return None
        model_tables_keep(lab, key, tables, disk=False)  # before the callback does
        return tables, RUN
    slots = _run_slots(settings.LAB_EXPLORE_RUNS_AT_ONCE)
    if not slots.acquire(timeout=RUN_WAIT_S):
        return None
    try:
        return model_tables_from(lab, params)
    finally:
        slots.release()


@lru_cache(maxsize=4)
def _run_slots(count: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(count)


def _throttled_text(retry: int) -> str:
    limit = settings.LAB_EXPLORE_RUNS_PER_MINUTE
    return (
        f"The model has run {limit} new parameter sets for you in the last minute, "
        f"the most a minute allows; values you have tried still answer at once. "
        f"New ones run again in {retry} s."
    )


_flights: dict[str, tuple[threading.Lock, int]] = {}
_flights_lock = threading.Lock()


@contextlib.contextmanager
def _single_flight(key: str) -> Iterator[None]:
    """Let one request of this process run a parameter set; the others wait for it
    (and then find its tables kept)."""
    with _flights_lock:
        lock, waiting = _flights.get(key, (threading.Lock(), 0))
        _flights[key] = (lock, waiting + 1)
    try:
        with lock:
            yield
    finally:
        with _flights_lock:
            lock, waiting = _flights[key]
            if waiting <= 1:
                del _flights[key]
            else:
                _flights[key] = (lock, waiting - 1)


def explore_moved(before: Tables, tables: Tables) -> dict[str, list[list[Cell]]]:
    """Return, per table of both, the cells that moved since ``before`` as
    ``[row, column, value before]``. The rule is the compare page's
    (``course.compare``): the same position, another value; a new row's cells all
    moved."""
    moved: dict[str, list[list[Cell]]] = {}
    for pair in tables_compared(_plain(before), _plain(tables)):
        if pair.first is None or pair.second is None:
            continue
        rows = pair.first.get("rows", [])
        moved[pair.name] = [
            [r, c, rows[r][c] if r < len(rows) and c < len(rows[r]) else None]
            for r, c in sorted(pair.moved)
        ]
    return moved


def explore_reshaped(before: Tables, tables: Tables) -> list[str]:
    """Say how the tables' shapes changed since ``before``: a cell that is no
    longer there cannot be marked ("copies: 1 row fewer")."""
    said = [f"{name}: a new table" for name in tables if name not in before]
    said += [f"{name}: no longer there" for name in before if name not in tables]
    for name in (name for name in tables if name in before):
        rows = len(tables[name]["rows"]) - len(before[name]["rows"])
        columns = len(tables[name]["columns"]) - len(before[name]["columns"])
        parts = [
            f"{abs(n)} {what if abs(n) == 1 else what + 's'} "
            + ("more" if n > 0 else "fewer")
            for n, what in ((rows, "row"), (columns, "column"))
            if n
        ]
        if parts:
            said.append(f"{name}: {', '.join(parts)}")
    return said


def explore_body(
    lab: Lab[Any], params: Params, served: Served, *, since: str
) -> dict[str, object]:
    """Return the JSON answer: the parameter set, its tables and charts, and what
    changed since the parameter set ``since`` (a ``model_key``; ``moved`` and
    ``reshaped`` are None when that set is not kept, or not a key)."""
    kept = model_tables_kept(lab, since) if since else None
    before = kept[0] if kept is not None else None
    return {
        "lesson": lab.slug,
        "key": served.key,
        "params": {p.name: p.text(params.get(p.name, p.default)) for p in lab.params},
        "changed": [
            p.name for p in lab.params if params.get(p.name, p.default) != p.default
        ],
        "tables": served.tables,
        "charts": [chart.as_json() for chart in lab.charts],
        "since": since or None,
        "moved": explore_moved(before, served.tables) if before is not None else None,
        "reshaped": (
            explore_reshaped(before, served.tables) if before is not None else None
        ),
    }


def _plain(tables: Tables) -> dict[str, dict[str, object]]:
    return {name: dict(table) for name, table in tables.items()}

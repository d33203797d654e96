"""How long each lab's model takes: at its defaults and at the slow ends of its
explore controls.

``python -m bench.model_times [SLUG ...] [--repeats N] [--limit-s S] [--write]``

The explorable page runs a model for every parameter set nobody asked for yet, so
a model's own time is the floor of an uncached answer. Per lab this times, in this
process (no daphne, no pool, nothing kept between runs but what the model keeps
itself):

- ``defaults``: the lesson's own parameter set;
- ``slider``: each control moved alone to the end of what the page lets an
  anonymous learner reach (a slider's high end or its low end, a select's other
  choices, a list at its most items of its largest values while an anonymous run may
  still cost that much), the slowest of these named;
- ``corner``: every control at its slow end at once, scaled back (the work
  parameters at their defaults) until an anonymous learner may run it.

Each figure is the best of ``--repeats`` runs (the machine is shared: the best is
the model's cost, the rest is other processes), each from empty memos (``ms``: the
labs' ``functools`` caches cleared first), and again at once (``ms again``: what
the process keeps, e.g. the variability rows of the queueing labs, reused). A run
over ``--limit-s`` seconds is not repeated. The table is printed slowest first
(``--write``: and written to ``bench/results/model-times.md``). No database, Redis
or lock is needed, but run it under ``flock /tmp/bench.lock`` all the same: it
keeps a core busy for minutes, and its figures mean most on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.common import machine_info, utcnow

RESULTS = Path(__file__).with_name("results") / "model-times.md"


@dataclass(frozen=True)
class Timing:
    slug: str
    case: str
    overrides: dict[str, Any]
    best_ms: float
    again_ms: float
    cost: float


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "true")
    import django

    django.setup()


def model_caches_clear() -> None:
    """Empty every memo the labs' code keeps in this process (``functools``
    caches in ``course.labs``), so a run pays for all of its work."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("course.labs") or module is None:
            continue
        for value in vars(module).values():
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


def time_run(
    lab: Any, overrides: dict[str, Any], repeats: int, limit_s: float
) -> tuple[float, float]:
    """Return the best wall times in ms of ``repeats`` model runs with ``overrides``:
    from empty memos, and run again at once (what the process kept helping)."""
    params = lab.validate(overrides)
    cold = again = float("inf")
    for _ in range(repeats):
        model_caches_clear()
        began = time.perf_counter()
        lab.run(params)
        middle = time.perf_counter()
        lab.run(params)
        ended = time.perf_counter()
        cold, again = min(cold, middle - began), min(again, ended - middle)
        if middle - began > limit_s:
            break
    return cold * 1000, again * 1000


def slow_ends(lab: Any) -> Iterator[tuple[str, Any]]:
    """Yield (parameter, value) for each slow end the explore controls reach."""
    from django.conf import settings

    from course.explore import controls_for
    from course.policies import run_cost

    anon = settings.LAB_ANON_COST_PER_RUN
    defaults = {p.name: p.default for p in lab.params}
    for control in controls_for(lab):
        if control.kind == "slider":
            assert control.low is not None
            assert control.high is not None
            low = control.low + (control.step if control.exclusive_minimum else 0)
            if control.minimum is not None:
                low = max(low, control.minimum)
            for value in (control.high, low):
                yield control.name, int(value) if control.integer else value
        elif control.kind == "select":
            for choice in control.choices:
                if choice != control.default:
                    yield control.name, choice
        elif control.kind == "list" and control.max_items:
            top = int(control.maximum) if control.maximum is not None else 100
            for items in range(control.max_items, 0, -1):
                # Distinct values: a repeated one may be a row the lab reuses.
                values = list(range(top, top - items, -1))
                if run_cost(lab, {**defaults, control.name: values}) <= anon:
                    yield control.name, values
                    break


def lab_timings(slug: str, repeats: int, limit_s: float) -> list[Timing]:
    from django.conf import settings

    from course.labs.registry import lab_get
    from course.policies import run_cost

    lab = lab_get(slug)
    defaults = {p.name: p.default for p in lab.params}
    works = {p.name for p in lab.params if p.work is not None}

    def timed(case: str, overrides: dict[str, Any]) -> Timing:
        cost = run_cost(lab, {**defaults, **overrides})
        cold, again = time_run(lab, overrides, repeats, limit_s)
        return Timing(slug, case, overrides, cold, again, cost)

    results = [timed("defaults", {})]
    singles = []
    for name, value in slow_ends(lab):
        try:
            singles.append(timed(f"{name}={_text(value)}", {name: value}))
        except Exception as error:  # a value the lab refuses in combination
            print(f"  {slug} {name}={value!r}: {error}", file=sys.stderr)
    if singles:
        slowest = max(singles, key=lambda t: t.best_ms)
        results.append(replace(slowest, case=f"slider {slowest.case}"))
        # The corner: the slower end of every parameter that costs nothing, and the
        # far end of the work parameters (slowest first) while an anonymous run may
        # still cost that much (the others stay at their defaults).
        corner: dict[str, Any] = {}
        budget = settings.LAB_ANON_COST_PER_RUN
        for single in sorted(singles, key=lambda t: -t.best_ms):
            ((name, value),) = single.overrides.items()
            if name in corner:
                continue
            trial = {**defaults, **corner, name: value}
            if name not in works or (
                _far(defaults[name], value) and run_cost(lab, trial) <= budget
            ):
                corner[name] = value
        try:
            results.append(timed("corner", corner))
        except Exception as error:
            print(f"  {slug} corner {corner!r}: {error}", file=sys.stderr)
    return results


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _far(default: Any, value: Any) -> bool:
    """Whether ``value`` is more work than ``default`` (a longer list, a larger
    number)."""
    if isinstance(value, list):
        return len(value) > len(default)
    return bool(value > default)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return (
            ",".join(str(v) for v in value)
            if len(value) < 4
            else (f"{len(value)} from {value[0]} down")
        )
    return str(value)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_times")
    parser.add_argument("slugs", nargs="*", help="labs (default: every lab)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit-s", type=float, default=5.0)
    parser.add_argument(
        "--write", action="store_true", help=f"also write {RESULTS.name}"
    )
    options = parser.parse_args(argv)
    _setup()
    from course.labs.registry import LABS

    machine = machine_info()
    rows: list[Timing] = []
    for slug in options.slugs or sorted(LABS):
        found = lab_timings(slug, options.repeats, options.limit_s)
        for t in found:
            line = f"{t.slug:40} {t.case:45} {t.best_ms:9.1f} ms {t.again_ms:9.1f} ms"
            print(line, file=sys.stderr, flush=True)
        rows.extend(found)
    dirty = " (working tree had uncommitted changes)" if machine["git_dirty"] else ""
    lines = [
        "# Model times: each lab's model at its defaults and its slow ends",
        "",
        f"- date: {utcnow().isoformat(timespec='seconds')}",
        f"- machine: {machine['cpus']} CPUs, Python {machine['python']}, load "
        f"{machine['load_average_at_start']} → {_load()}",
        f"- code: {machine['git_commit'][:12]}{dirty}",
        f"- command: `python -m bench.model_times {' '.join(argv)}`".rstrip(),
        "",
        "| lab | case | ms | ms again | cost | parameters |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for t in sorted(rows, key=lambda t: -t.best_ms):
        shown = ", ".join(f"{k}={_text(v)}" for k, v in t.overrides.items()) or "-"
        case = t.case.split(" ")[0]
        lines.append(f"| {t.slug} | {case} | {t.best_ms:.1f} | {t.again_ms:.1f} | "
                     f"{t.cost:g} | {shown} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if options.write:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

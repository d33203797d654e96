"""The models made faster for the explorable page (the queueing labs,
cache-metrics, poison-messages-and-retry) print exactly the tables they printed
before.

The variability simulation (course.labs.harness.queueing) and the depth run were
rewritten for speed (the explorable page runs a model for every new parameter set);
what they compute must not move. ``pinned_models.json`` holds a digest of each
case's tables as the code before that rewrite printed them, every figure to the
precision the table prints. The cases cover every branch of the simulation: even
and Poisson arrivals, equal jobs and each of the three ways ``random.gammavariate``
draws (shape above, at and below 1), one server and many, loads at and above 100 %,
a bounded queue (backpressure, load shedding) with no place, one, a few and many,
and the depth run's edges (nobody consuming, nothing produced, no rows);
cache-metrics with no cache, tiny ones and large ones; the retry wave with no base,
a cap and none.

The printed tables round to three decimals (one for milliseconds), so a change in
the last bits of a float would pass them. ``pinned_simulations.json`` holds, per
``SIMULATIONS`` case, the bits themselves of what ``simulate`` returns: the waits
(a digest of their doubles), the window and the area.

To re-pin after a change that is *meant* to move a figure: ``PIN_WRITE=1`` writes
the file from the current code (and skips); commit it with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from course.labs.harness.queueing import QueueRun, simulate
from course.tests.labs.lab_results import run

PINS = Path(__file__).with_name("pinned_models.json")
SIMULATION_PINS = Path(__file__).with_name("pinned_simulations.json")

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mq-defaults": ("message-queues", {}),
    "mq-poisson-exponential-3": (
        "message-queues",
        {
            "arrivals": "poisson",
            "service_cv": 1.0,
            "utilisations": [50, 90, 120],
            "variability_jobs": 5000,
            "seed": 7,
            "variability_consumers": 3,
            "production": 12,
            "consumption_rate": 2,
            "rounds": 20,
            "consumers": [0, 2, 5],
            "visibility": 0.5,
        },
    ),
    "mq-fixed-heavy-tail": (
        "message-queues",
        {
            "service_cv": 2.5,
            "utilisations": [30, 99, 150],
            "variability_jobs": 3000,
            "seed": 123,
            "production": 0,
            "consumers": [],
        },
    ),
    "mq-poisson-16-short": (
        "message-queues",
        {
            "arrivals": "poisson",
            "variability_consumers": 16,
            "utilisations": [95, 60],
            "variability_jobs": 100,
            "consumption_rate": 0,
            "rounds": 30,
            "production": 50,
            "consumers": [1, 100],
        },
    ),
    "mq-poisson-gamma-2": (
        "message-queues",
        {
            "arrivals": "poisson",
            "service_cv": 0.3,
            "variability_consumers": 2,
            "utilisations": [10, 80, 100],
            "seed": 0,
        },
    ),
    "mq-fixed-near-constant-4": (
        "message-queues",
        {
            "service_cv": 0.05,
            "variability_consumers": 4,
            "utilisations": [1, 97],
            "variability_jobs": 7000,
            "seed": 2147483647,
        },
    ),
    "wp-defaults": ("worker-processes", {}),
    "wp-poisson-gamma": (
        "worker-processes",
        {
            "arrivals": "poisson",
            "service_cv": 1.5,
            "workers": [1, 3, 16],
            "utilisations": [40, 85, 99],
            "variability_jobs": 4000,
            "job_ms": 37,
            "seed": 11,
        },
    ),
    "bp-defaults": ("backpressure", {}),
    "bp-poisson-bounded": (
        "backpressure",
        {
            "arrivals": "poisson",
            "service_cv": 0.8,
            "capacity": 7,
            "utilisations": [50, 100, 130, 200],
            "variability_jobs": 6000,
            "consume_per_s": 45,
            "seed": 99,
        },
    ),
    "bp-one-place": (
        "backpressure",
        {
            "arrivals": "poisson",
            "service_cv": 2.0,
            "capacity": 1,
            "utilisations": [70, 150],
            "variability_jobs": 2000,
        },
    ),
    "ls-defaults": ("load-shedding", {}),
    "ls-poisson-pool": (
        "load-shedding",
        {
            "arrivals": "poisson",
            "service_cv": 1.0,
            "max_concurrent": 5,
            "max_queue": 40,
            "utilisations": [60, 95, 120, 200],
            "variability_jobs": 8000,
            "seed": 5,
        },
    ),
    "ls-fixed-gamma-queue-0": (
        "load-shedding",
        {
            "service_cv": 0.6,
            "max_concurrent": 2,
            "max_queue": 0,
            "utilisations": [80, 110],
            "variability_jobs": 1500,
        },
    ),
    "cm-defaults": ("cache-metrics", {}),
    "cm-small-caches": (
        "cache-metrics",
        {
            "requests": 3000,
            "seed": 7,
            "capacities": [0, 1, 5, 50, 500],
            "breakdown_capacity": 20,
        },
    ),
    "cm-no-breakdown-cache": (
        "cache-metrics",
        {"requests": 500, "seed": 0, "capacities": [3], "breakdown_capacity": 0},
    ),
    "pm-defaults": ("poison-messages-and-retry", {}),
    "pm-wide-wave": (
        "poison-messages-and-retry",
        {
            "consumers": 900,
            "attempts": 40,
            "base_ms": 5000,
            "cap_ms": 0,
            "bucket_ms": 1000,
            "budget_ms": 3_000_000,
            "seed": 3,
        },
    ),
    "pm-no-base": (
        "poison-messages-and-retry",
        {"consumers": 50, "attempts": 7, "base_ms": 0, "cap_ms": 100, "bucket_ms": 1},
    ),
    "pm-capped": (
        "poison-messages-and-retry",
        {
            "consumers": 200,
            "attempts": 12,
            "base_ms": 150,
            "cap_ms": 4000,
            "bucket_ms": 250,
            "seed": 0,
        },
    ),
}


# utilisation, servers, arrivals, service_cv, jobs, seed, capacity: each loop of the
# simulation (one worker, several, bounded), every way of drawing a job's length.
SIMULATIONS: list[tuple[float, int, str, float, int, int, int | None]] = [
    (0.9, 1, "poisson", 1.0, 3000, 1, None),
    (0.8, 3, "poisson", 2.5, 3000, 2, None),
    (0.95, 1, "fixed", 0.3, 3000, 3, None),
    (1.3, 2, "poisson", 0.0, 3000, 4, None),
    (0.7, 1, "poisson", 1.0, 3000, 5, 2),
    (1.5, 4, "fixed", 4.0, 3000, 6, 0),
    (0.5, 16, "poisson", 0.05, 1000, 7, 10),
    (0.99, 1, "fixed", 0.0, 2000, 8, None),
    (1.2, 1, "poisson", 0.7, 2500, 9, 5),
]


def _simulation_name(case: tuple[object, ...]) -> str:
    return "-".join(str(part) for part in case)


def _simulated(case: tuple[float, int, str, float, int, int, int | None]) -> QueueRun:
    utilisation, servers, arrivals, cv, jobs, seed, capacity = case
    return simulate(
        utilisation=utilisation,
        servers=servers,
        mean_service=1.0 if servers % 2 else 300.0,
        arrivals=arrivals,
        service_cv=cv,
        jobs=jobs,
        seed=seed,
        capacity=capacity,
    )


def _bits(found: QueueRun) -> list[object]:
    """Return the run's figures as their exact bits."""
    packed = struct.pack(f"{len(found.waits)}d", *found.waits)
    return [
        found.arrived,
        len(found.waits),
        hashlib.sha256(packed).hexdigest()[:16],
        found.window.hex(),
        found.waiting_area.hex(),
    ]


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _tables(slug: str, overrides: dict[str, Any]) -> dict[str, str]:
    """Return a digest of each table as ``lab --json`` prints it.

    Digests, not the tables: the default runs reproduce the course's own tables, and
    a file of them would repeat the course figure for figure. A table that moved
    fails its own digest; ``lab --json`` prints it.
    """
    tables = run(slug, **overrides)["tables"]
    return {name: _digest(table) for name, table in tables.items()}


def test_write_pins_when_asked():
    if not os.environ.get("PIN_WRITE"):
        pytest.skip("PIN_WRITE=1 re-pins the tables from the current code")
    pins = {name: _tables(slug, overrides) for name, (slug, overrides) in CASES.items()}
    PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
    bits = {_simulation_name(case): _bits(_simulated(case)) for case in SIMULATIONS}
    SIMULATION_PINS.write_text(json.dumps(bits, indent=1) + "\n")
    pytest.skip(f"wrote {PINS.name}: commit it with the reason the figures moved")


def test_every_case_is_pinned():
    assert sorted(json.loads(PINS.read_text())) == sorted(CASES)
    pinned = json.loads(SIMULATION_PINS.read_text())
    assert sorted(pinned) == sorted(_simulation_name(case) for case in SIMULATIONS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_prints_the_pinned_tables(name: str):
    slug, overrides = CASES[name]
    assert _tables(slug, overrides) == json.loads(PINS.read_text())[name]


@pytest.mark.parametrize("case", SIMULATIONS, ids=_simulation_name)
def test_simulation_returns_the_pinned_bits(case):
    pinned = json.loads(SIMULATION_PINS.read_text())[_simulation_name(case)]
    assert _bits(_simulated(case)) == pinned

"""Random arrivals and a spread of service times: a seeded G/G/c queue and its formulas.

The queueing labs' course experiments space arrivals evenly and give every job the
same length, so a wait appears only once arrivals outrun the workers. This module
adds the other half of the story. ``simulate`` runs a first-come-first-served queue
with ``servers`` workers on a virtual clock: arrivals evenly spaced or Poisson,
service times fixed or drawn from a gamma distribution with a chosen coefficient of
variation. ``variability_rows`` (and ``bounded_rows``, which adds a tail-drop bound)
turn one run per utilisation into the labs' ``variability`` table, beside the closed
forms it should approach (Erlang C for M/M/c, Kingman's approximation for general
arrivals and service).

Every draw comes from ``random.Random`` seeded by text, so a run repeats exactly on
any machine; arrivals and services use separate streams, so the same jobs, scaled,
meet every load (common random numbers: a row differs from its neighbour by the load,
not by luck).
"""

from __future__ import annotations

import math
import random
from array import array
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from heapq import heapreplace
from itertools import accumulate, islice, repeat
from math import log
from operator import truediv
from typing import Final, Protocol

from course.labs.harness.base import Cell, Param

ARRIVALS: Final = ("fixed", "poisson")
DEFAULT_UTILISATIONS: Final = [50, 70, 80, 90, 95]
DEFAULT_JOBS: Final = 20_000
SEED_DEFAULT: Final = 20250729
SEED_MAX: Final = 2**31 - 1
MAX_CV: Final = 4.0
# The first tenth of a run starts from an empty queue, which no steady state has;
# it is run but not measured.
WARMUP_SHARE: Final = 0.1

STABLE: Final = "stable"
UNSTABLE: Final = (
    "unstable: arrivals at or above what the workers finish, so the queue grows "
    "for as long as the run lasts; no mean wait, and Little's law does not apply"
)


# --- the simulation ------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRun:
    """What one simulated load measured, after the warm-up."""

    arrived: int  # measured arrivals, admitted or not
    waits: tuple[float, ...]  # admitted measured jobs' waits, sorted
    window: float  # from the first measured arrival to the arrival after the last
    waiting_area: float  # integral over the window of the number of jobs waiting

    @property
    def admitted(self) -> int:
        return len(self.waits)

    @property
    def dropped_share(self) -> float:
        """Share of the measured arrivals a full queue turned away."""
        return (self.arrived - self.admitted) / self.arrived if self.arrived else 0.0

    @property
    def arrival_rate(self) -> float:
        """Admitted jobs per unit of time over the measured window (lambda)."""
        return self.admitted / self.window if self.window > 0 else 0.0

    @property
    def mean_wait(self) -> float:
        """W: the mean time an admitted job waits before a worker starts it."""
        return sum(self.waits) / len(self.waits) if self.waits else 0.0

    @property
    def mean_waiting(self) -> float:
        """L: the time-average number of jobs waiting, over the same window."""
        return self.waiting_area / self.window if self.window > 0 else 0.0

    def percentile(self, share: float) -> float:
        return percentile(self.waits, share)


def percentile(ordered: Sequence[float], share: float) -> float:
    """Nearest-rank percentile of sorted values (p99: the value 99 % do not exceed)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


# The draws of one seed do not depend on the load or the number of servers: a lab
# runs the same seed at every load (and, in worker-processes, every pool size), so
# the last few seeds' draws are kept (compact arrays: 8 bytes a job).
DRAWS_KEPT: Final = 4


@lru_cache(maxsize=DRAWS_KEPT)
def _unit_gaps(seed: int, count: int) -> array[float]:
    """Return ``count`` Poisson gaps of mean 1, before scaling to a load.

    Each is ``-log(1 - u)`` for the next ``u`` of the seed's arrivals stream:
    ``random.expovariate(lambd)`` is that value divided by ``lambd``, so dividing
    these by ``1 / gap`` gives the very same floats as drawing at each load.
    """
    uniform = random.Random(f"{seed}:arrivals").random
    return array("d", [-log(1.0 - uniform()) for _ in range(count)])


@lru_cache(maxsize=DRAWS_KEPT)
def _service_times(seed: int, mean: float, cv: float, count: int) -> array[float]:
    """Return ``count`` service times with this mean and coefficient of variation.

    A gamma distribution of shape 1/cv² has exactly that spread: shape 1 is the
    exponential (cv 1), a large shape nearly constant, a small one a few very long
    jobs among many short ones.
    """
    gamma = random.Random(f"{seed}:service").gammavariate
    shape = 1 / (cv * cv)
    scale = mean / shape
    return array("d", [gamma(shape, scale) for _ in range(count)])


def _services(seed: int, mean: float, cv: float, count: int) -> Iterable[float]:
    return repeat(mean, count) if cv == 0 else _service_times(seed, mean, cv, count)


def simulate(
    *,
    utilisation: float,
    servers: int,
    mean_service: float,
    arrivals: str,
    service_cv: float,
    jobs: int,
    seed: int,
    capacity: int | None = None,
) -> QueueRun:
    """Run ``jobs`` measured jobs (plus a warm-up) through a FIFO queue.

    ``utilisation`` is rho = lambda·E[S]/servers. ``capacity`` bounds the jobs
    waiting (not running): an arrival that would wait and finds every place taken is
    dropped (tail drop); None is an unbounded queue. Each admitted job starts when it
    arrives or when the earliest worker frees, whichever is later (Kiefer-Wolfowitz:
    one heap of free instants).
    """
    if utilisation <= 0 or servers < 1 or mean_service <= 0 or jobs < 1:
        raise ValueError("simulate needs a positive load, servers, service and jobs")
    warmup = math.ceil(jobs * WARMUP_SHARE)
    total = warmup + jobs
    gap = mean_service / (servers * utilisation)
    # One more arrival than jobs: it closes the measured window.
    gaps: Iterable[float] = (
        map(truediv, _unit_gaps(seed, total + 1), repeat(1 / gap))
        if arrivals == "poisson"
        else repeat(gap, total + 1)
    )
    times = list(accumulate(gaps))
    # A service is drawn for every arrival, dropped or not, so a bounded and an
    # unbounded run of the same seed see the same jobs.
    services = _services(seed, mean_service, service_cv, total)
    jobs_in = zip(times[:total], services, strict=True)
    window = _Window(warmup=warmup, begin=times[warmup], end=times[total])
    if capacity is not None:
        waits, area = _bounded_queue(jobs_in, window, servers, capacity)
    elif servers == 1:
        waits, area = _one_worker(jobs_in, window)
    else:
        waits, area = _workers(jobs_in, window, servers)
    return QueueRun(
        arrived=jobs,
        waits=tuple(waits),
        window=window.end - window.begin,
        waiting_area=area,
    )


@dataclass(frozen=True)
class _Window:
    """The measured part of a run: jobs from ``warmup`` on, arriving in
    [``begin``, ``end``)."""

    warmup: int
    begin: float
    end: float


# The three loops below are one simulation, written three times so that the common
# cases (no bound; one worker) pay for no test they do not need: this is the hot
# loop of every queueing lab's model. Each computes, in the same order and with the
# same float operations, what the straightforward loop would: per admitted job,
# ``start = max(earliest free worker, arrival)``, its wait ``start - arrival`` when
# measured, and the part of [arrival, start] inside the window added to the area.
# Arrivals never decrease, so a warm-up job arrives at or before ``begin`` (its
# part starts there) and a measured one at or after it (its part starts at its
# arrival, and is empty when it does not wait).


def _one_worker(
    jobs: Iterator[tuple[float, float]], window: _Window
) -> tuple[list[float], float]:
    """Unbounded queue, one worker: no heap, its one free instant. Return the
    measured waits, sorted, and the area."""
    begin, end = window.begin, window.end
    free = 0.0
    area = 0.0
    for now, service in islice(jobs, window.warmup):
        start = free if free > now else now
        free = start + service
        high = start if start < end else end
        if high > begin:
            area += high - begin
    waits: list[float] = []
    wait = waits.append
    idle = 0  # measured jobs that found the worker free: a wait of 0.0 each
    for now, service in jobs:
        if free > now:
            high = free if free < end else end
            if high > now:
                area += high - now
            wait(free - now)
            free += service
        else:
            idle += 1
            free = now + service
    return _sorted_waits(idle, waits), area


def _workers(
    jobs: Iterator[tuple[float, float]], window: _Window, servers: int
) -> tuple[list[float], float]:
    """Unbounded queue, several workers: a heap of their free instants."""
    begin, end = window.begin, window.end
    free = [0.0] * servers
    area = 0.0
    for now, service in islice(jobs, window.warmup):
        earliest = free[0]
        start = earliest if earliest > now else now
        heapreplace(free, start + service)
        high = start if start < end else end
        if high > begin:
            area += high - begin
    waits: list[float] = []
    wait = waits.append
    idle = 0  # measured jobs that found a worker free: a wait of 0.0 each
    for now, service in jobs:
        earliest = free[0]
        if earliest > now:
            high = earliest if earliest < end else end
            if high > now:
                area += high - now
            wait(earliest - now)
            heapreplace(free, earliest + service)
        else:
            idle += 1
            heapreplace(free, now + service)
    return _sorted_waits(idle, waits), area


def _sorted_waits(idle: int, waited: list[float]) -> list[float]:
    """Return every measured wait in order: the ``idle`` zeros, then the others
    sorted (all positive: sorting the zeros with them would only cost time)."""
    waited.sort()
    return [0.0] * idle + waited


def _bounded_queue(
    jobs: Iterator[tuple[float, float]], window: _Window, servers: int, capacity: int
) -> tuple[list[float], float]:
    """A queue of ``capacity`` waiting places: a job that would wait and finds them
    all taken is dropped (and neither waits nor counts in the area)."""
    begin, end, warmup = window.begin, window.end, window.warmup
    free = [0.0] * servers  # when each worker can start its next job
    waiting: deque[float] = deque()  # start instants of admitted jobs not yet started
    area = 0.0
    waits: list[float] = []
    for index, (now, service) in enumerate(jobs):
        earliest = free[0]
        while waiting and waiting[0] <= now:
            waiting.popleft()
        if earliest > now:
            if len(waiting) >= capacity:
                continue  # tail drop: it would wait, and every place is taken
            start = earliest
            waiting.append(start)
        else:
            start = now
        heapreplace(free, start + service)
        low = now if now > begin else begin
        high = start if start < end else end
        if high > low:
            area += high - low
        if index >= warmup:
            waits.append(start - now)
    waits.sort()
    return waits, area


# --- the closed forms ----------------------------------------------------------------


def erlang_c(servers: int, utilisation: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang's C formula).

    Computed through Erlang B's recursion, which stays accurate for many servers
    where the textbook sum of factorials overflows.
    """
    if not 0 < utilisation < 1:
        raise ValueError("Erlang C needs a utilisation strictly between 0 and 1")
    offered = servers * utilisation
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    return blocking / (1 - utilisation * (1 - blocking))


def erlang_c_wait(servers: int, utilisation: float, mean_service: float) -> float:
    """Mean wait before service in M/M/c: C(c, rho)·E[S] / (c·(1 - rho))."""
    return erlang_c(servers, utilisation) * mean_service / (servers * (1 - utilisation))


def kingman_wait(
    servers: int,
    utilisation: float,
    mean_service: float,
    *,
    arrival_cv: float,
    service_cv: float,
) -> float:
    """Kingman's approximation of the mean wait, (rho/(1-rho))·((ca²+cs²)/2)·E[S].

    That is the one-server formula. For several servers the M/M/c wait (Erlang C)
    takes the place of (rho/(1-rho))·E[S] and is scaled by the same variability factor
    (Allen and Cunneen's extension); with one server both read the same, and with
    Poisson arrivals and exponential service it is Erlang C itself.
    """
    factor = (arrival_cv**2 + service_cv**2) / 2
    if servers == 1:
        return utilisation / (1 - utilisation) * factor * mean_service
    return erlang_c_wait(servers, utilisation, mean_service) * factor


def arrival_cv(arrivals: str) -> float:
    """Coefficient of variation of the gaps between arrivals: 0 even, 1 Poisson."""
    return 1.0 if arrivals == "poisson" else 0.0


# --- the lab's table -----------------------------------------------------------------


@dataclass(frozen=True)
class Units:
    """How a lab prints time: in mean service times, or in milliseconds."""

    wait_suffix: str  # "" (service times) or "_ms"
    rate_column: str  # "arrival_rate" (per service time) or "arrivals_per_s"
    rate_per_unit: float  # 1 per service time, or 1000 (per ms → per s)
    digits: int  # decimals of a wait

    def wait(self, name: str) -> str:
        return f"{name}{self.wait_suffix}"


SERVICE_TIMES: Final = Units("", "arrival_rate", 1.0, 3)
MILLISECONDS: Final = Units("_ms", "arrivals_per_s", 1000.0, 1)


def variability_columns(units: Units) -> list[str]:
    return [
        "utilisation_pct",
        units.rate_column,
        units.wait("mean_wait"),
        units.wait("p50_wait"),
        units.wait("p99_wait"),
        "measured_l",
        "lambda_times_w",
        units.wait("kingman_wait"),
        units.wait("erlang_c_wait"),
        "note",
    ]


@dataclass(frozen=True)
class Scenario:
    """The variability settings a lab's parameters give, for one pool size."""

    servers: int
    mean_service: float
    arrivals: str
    service_cv: float
    jobs: int
    seed: int

    def run(self, utilisation_pct: int, capacity: int | None = None) -> QueueRun:
        return simulate(
            utilisation=utilisation_pct / 100,
            servers=self.servers,
            mean_service=self.mean_service,
            arrivals=self.arrivals,
            service_cv=self.service_cv,
            jobs=self.jobs,
            seed=self.seed,
            capacity=capacity,
        )


def variability_row(
    scenario: Scenario,
    utilisation_pct: int,
    units: Units,
    run: QueueRun,
    *,
    unstable_note: str = UNSTABLE,
) -> list[Cell]:
    """One row of ``variability`` from an unbounded run at this load."""
    rate = round(run.arrival_rate * units.rate_per_unit, 3)
    rho = utilisation_pct / 100
    if rho >= 1:
        # No steady state: any mean the run printed would only say how long it ran.
        return [utilisation_pct, rate, None, None, None, None, None, None, None,
                unstable_note]  # fmt: skip
    kingman = kingman_wait(
        scenario.servers,
        rho,
        scenario.mean_service,
        arrival_cv=arrival_cv(scenario.arrivals),
        service_cv=scenario.service_cv,
    )
    erlang = erlang_c_wait(scenario.servers, rho, scenario.mean_service)
    digits = units.digits
    return [
        utilisation_pct,
        rate,
        round(run.mean_wait, digits),
        round(run.percentile(0.50), digits),
        round(run.percentile(0.99), digits),
        round(run.mean_waiting, 3),
        round(run.arrival_rate * run.mean_wait, 3),
        round(kingman, digits),
        round(erlang, digits),
        STABLE,
    ]


# A lab's variability rows depend on the scenario and the load alone, not on the
# lab's other parameters, and the explorable page runs a model for every new
# parameter set, most of them a move of a slider that leaves these rows as they
# were. So a process keeps the last rows it computed (a few hundred short lists):
# the next set reuses them instead of simulating the same jobs again.
ROWS_KEPT: Final = 256


def scenario_row(
    scenario: Scenario,
    utilisation_pct: int,
    units: Units,
    *,
    unstable_note: str = UNSTABLE,
) -> list[Cell]:
    """Return ``variability_row`` of the scenario's unbounded run at this load."""
    return list(_kept_row(scenario, utilisation_pct, units, unstable_note))


@lru_cache(maxsize=ROWS_KEPT)
def _kept_row(
    scenario: Scenario, utilisation_pct: int, units: Units, unstable_note: str
) -> tuple[Cell, ...]:
    run = scenario.run(utilisation_pct)
    return tuple(
        variability_row(
            scenario, utilisation_pct, units, run, unstable_note=unstable_note
        )
    )


def variability_rows(
    scenario: Scenario, utilisations: Sequence[int], units: Units
) -> list[list[Cell]]:
    return [scenario_row(scenario, pct, units) for pct in utilisations]


def bounded_rows(
    scenario: Scenario,
    utilisations: Sequence[int],
    units: Units,
    *,
    capacity: int,
    unstable_note: str,
) -> list[list[Cell]]:
    """``variability`` rows with two more cells from the same jobs meeting a bound.

    Each row is the unbounded queue's, then the share of arrivals a queue of
    ``capacity`` waiting places turns away (tail drop) and the p99 wait of those it
    admits. A bound keeps the queue stable at any load, so those two cells are
    filled even where the unbounded queue has no steady state.
    """
    rows: list[list[Cell]] = []
    for pct in utilisations:
        base = scenario_row(scenario, pct, units, unstable_note=unstable_note)
        drop, p99 = _kept_bounded(scenario, pct, units, capacity)
        rows.append([*base[:-1], drop, p99, base[-1]])
    return rows


@lru_cache(maxsize=ROWS_KEPT)
def _kept_bounded(
    scenario: Scenario, utilisation_pct: int, units: Units, capacity: int
) -> tuple[float, float]:
    """Return the bounded run's two cells: the share dropped, the p99 wait."""
    bounded = scenario.run(utilisation_pct, capacity=capacity)
    return (
        round(100 * bounded.dropped_share, 2),
        round(bounded.percentile(0.99), units.digits),
    )


def bounded_columns(units: Units, *, drop: str, wait: str) -> list[str]:
    """The ``variability`` columns with the bounded queue's two before the note."""
    base = variability_columns(units)
    return [*base[:-1], drop, wait, base[-1]]


# --- the parameters every variability lab shares ---------------------------------


def variability_params(*, max_utilisation: int) -> tuple[Param, ...]:
    """The five parameters of the variability run; the defaults are the course's
    deterministic setting (even arrivals, equal jobs), so the course's tables and
    this one's zero waits are what a default run prints."""
    return (
        Param(
            "arrivals",
            "str",
            "fixed",
            "how jobs arrive in the variability run: fixed (evenly spaced) or "
            "poisson (at random, same mean rate)",
            max_length=10,
        ),
        Param(
            "service_cv",
            "float",
            0.0,
            "spread of job lengths in the variability run, as a coefficient of "
            "variation (0: all equal; 1: exponential)",
            minimum=0,
            maximum=MAX_CV,
        ),
        Param(
            "utilisations",
            "int_list",
            list(DEFAULT_UTILISATIONS),
            "loads of the variability run, % of what the workers finish, one row "
            "each" + ("" if max_utilisation < 100 else " (100 or more: unstable)"),
            minimum=1,
            maximum=max_utilisation,
            max_items=8,
            work="count",
        ),
        Param(
            "variability_jobs",
            "int",
            DEFAULT_JOBS,
            "jobs measured per load in the variability run (a tenth more run "
            "first, as warm-up)",
            minimum=100,
            maximum=200_000,
            work="value",
        ),
        Param(
            "seed",
            "int",
            SEED_DEFAULT,
            "generator seed of the variability run",
            minimum=0,
            maximum=SEED_MAX,
        ),
    )


class VariabilityParams(Protocol):
    """The parameters of the variability run, as every lab that has one reads them."""

    @property
    def arrivals(self) -> str: ...

    @property
    def service_cv(self) -> float: ...

    @property
    def utilisations(self) -> list[int]: ...

    @property
    def variability_jobs(self) -> int: ...

    @property
    def seed(self) -> int: ...


def variability_problem(params: VariabilityParams) -> str | None:
    """Return why the variability settings cannot run (one line), or None."""
    if params.arrivals not in ARRIVALS:
        return f"arrivals: must be fixed or poisson, got {params.arrivals!r}"
    return None


def scenario_of(
    params: VariabilityParams, *, servers: int, mean_service: float
) -> Scenario:
    """Read the shared parameters (already checked) into a Scenario."""
    return Scenario(
        servers=servers,
        mean_service=mean_service,
        arrivals=params.arrivals,
        service_cv=params.service_cv,
        jobs=params.variability_jobs,
        seed=params.seed,
    )

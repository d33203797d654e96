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

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
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


def _service_draw(rng: random.Random, mean: float, cv: float) -> Callable[[], float]:
    """Return a draw of one service time with this mean and coefficient of variation.

    A gamma distribution of shape 1/cv² has exactly that spread: shape 1 is the
    exponential (cv 1), a large shape nearly constant, a small one a few very long
    jobs among many short ones.
    """
    if cv == 0:
        return lambda: mean
    shape = 1 / (cv * cv)
    scale = mean / shape
    return lambda: rng.gammavariate(shape, scale)


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
    arrivals_rng = random.Random(f"{seed}:arrivals")
    if arrivals == "poisson":
        gaps = [arrivals_rng.expovariate(1 / gap) for _ in range(total + 1)]
    else:
        gaps = [gap] * (total + 1)
    # One more arrival than jobs: it closes the measured window.
    times = list(accumulate(gaps))
    draw = _service_draw(random.Random(f"{seed}:service"), mean_service, service_cv)
    # A service is drawn for every arrival, dropped or not, so a bounded and an
    # unbounded run of the same seed see the same jobs.
    services = [draw() for _ in range(total)]

    free = [0.0] * servers  # when each worker can start its next job
    waiting: deque[float] = deque()  # start instants of admitted jobs not yet started
    starts: list[float] = []
    admitted_at: list[float] = []
    measured_waits: list[float] = []
    for index in range(total):
        now = times[index]
        earliest = free[0]
        if capacity is not None:
            while waiting and waiting[0] <= now:
                waiting.popleft()
            if earliest > now and len(waiting) >= capacity:
                continue  # tail drop: it would wait, and every place is taken
        start = earliest if earliest > now else now
        heapq.heapreplace(free, start + services[index])
        if capacity is not None and start > now:
            waiting.append(start)
        starts.append(start)
        admitted_at.append(now)
        if index >= warmup:
            measured_waits.append(start - now)

    begin, end = times[warmup], times[total]
    area = 0.0
    for arrived, started in zip(admitted_at, starts, strict=True):
        low = arrived if arrived > begin else begin
        high = started if started < end else end
        if high > low:
            area += high - low
    measured_waits.sort()
    return QueueRun(
        arrived=jobs,
        waits=tuple(measured_waits),
        window=end - begin,
        waiting_area=area,
    )


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


def variability_rows(
    scenario: Scenario, utilisations: Sequence[int], units: Units
) -> list[list[Cell]]:
    return [
        variability_row(scenario, pct, units, scenario.run(pct)) for pct in utilisations
    ]


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
        base = variability_row(
            scenario, pct, units, scenario.run(pct), unstable_note=unstable_note
        )
        bounded = scenario.run(pct, capacity=capacity)
        rows.append(
            [
                *base[:-1],
                round(100 * bounded.dropped_share, 2),
                round(bounded.percentile(0.99), units.digits),
                base[-1],
            ]
        )
    return rows


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

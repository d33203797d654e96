"""Random arrivals in the four queueing labs: the simulation against closed forms, the
variability tables, their refusals, and the course's tables left as they were.

The simulation is checked against formulas it does not use: the M/M/1 and M/M/c
mean waits (Erlang C, also written here as the textbook sum, independently of the
module's recursion), Pollaczek-Khinchine for one server with any spread of job
lengths, the M/M/1/K and Erlang B losses of a bounded queue. Runs are long enough
(hundreds of thousands of jobs) for the tolerance to be several standard errors,
and seeded, so they never flake.
"""

from __future__ import annotations

import math

import pytest

from course.labs.harness.base import ParamError
from course.labs.harness.queueing import (
    UNSTABLE,
    erlang_c,
    erlang_c_wait,
    kingman_wait,
    percentile,
    simulate,
)
from course.labs.registry import lab_get
from course.tests.labs.lab_results import (
    DETERMINISTIC,
    assert_refused,
    lab_json,
    records,
    run,
)

SEED = 20250729
# Long runs: at 90 % the waits of one server are correlated over thousands of jobs,
# so 400,000 measured jobs put one standard error of the mean near 2 %.
LONG = 400_000
SLUGS = ("message-queues", "worker-processes", "backpressure", "load-shedding")
POISSON = {"arrivals": "poisson", "service_cv": 1}


def textbook_erlang_c(servers: int, rho: float) -> float:
    """Erlang C as the textbook writes it: a sum of Poisson terms."""
    offered = servers * rho
    last = offered**servers / math.factorial(servers) / (1 - rho)
    head = sum(offered**k / math.factorial(k) for k in range(servers))
    return last / (head + last)


def mean_wait(servers: int, rho: float, **kwargs: object) -> float:
    settings: dict[str, object] = {
        "arrivals": "poisson", "service_cv": 1.0, "jobs": LONG, "seed": SEED,
        **kwargs,
    }  # fmt: skip
    return simulate(
        utilisation=rho,
        servers=servers,
        mean_service=1.0,
        **settings,  # type: ignore[arg-type]
    ).mean_wait


# --- the closed forms --------------------------------------------------------------


@pytest.mark.parametrize("servers", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("rho", [0.1, 0.5, 0.8, 0.9, 0.95, 0.99])
def test_erlang_c_matches_the_textbook_sum(servers, rho):
    assert erlang_c(servers, rho) == pytest.approx(textbook_erlang_c(servers, rho))


def test_the_formulas_on_values_worked_by_hand():
    assert erlang_c(1, 0.9) == pytest.approx(0.9)  # one server: P(wait) = rho
    assert erlang_c(2, 0.5) == pytest.approx(1 / 3)
    assert erlang_c_wait(1, 0.9, 1.0) == pytest.approx(9.0)  # rho/(1-rho) service times
    assert erlang_c_wait(2, 0.5, 300.0) == pytest.approx(100.0)
    # Kingman: even arrivals and equal jobs never wait; Poisson + exponential is M/M/1.
    assert kingman_wait(1, 0.9, 1.0, arrival_cv=0, service_cv=0) == 0
    assert kingman_wait(1, 0.9, 1.0, arrival_cv=1, service_cv=1) == pytest.approx(9)
    assert kingman_wait(1, 0.8, 10.0, arrival_cv=1, service_cv=0) == pytest.approx(20)
    assert kingman_wait(4, 0.8, 1.0, arrival_cv=1, service_cv=0) == pytest.approx(
        erlang_c_wait(4, 0.8, 1.0) / 2
    )
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    assert percentile([], 0.99) == 0.0


# --- the simulation against them ----------------------------------------------------


@pytest.mark.parametrize(
    ("servers", "rho", "tolerance"),
    [
        (1, 0.5, 0.05),
        (1, 0.8, 0.05),
        (1, 0.9, 0.08),
        (2, 0.8, 0.05),
        (4, 0.5, 0.05),
        (4, 0.8, 0.05),
        (4, 0.9, 0.08),
    ],
)
def test_poisson_and_exponential_jobs_wait_as_erlang_c_says(servers, rho, tolerance):
    expected = textbook_erlang_c(servers, rho) / (servers * (1 - rho))
    assert mean_wait(servers, rho) == pytest.approx(expected, rel=tolerance)


@pytest.mark.parametrize("rho", [0.5, 0.8, 0.9])
def test_the_p99_of_one_server_is_the_m_m_1_quantile(rho):
    # P(wait > t) = rho·exp(-(1-rho)t): the wait 99 % of jobs do not exceed.
    expected = math.log(100 * rho) / (1 - rho)
    found = simulate(
        utilisation=rho, servers=1, mean_service=1.0, arrivals="poisson",
        service_cv=1.0, jobs=LONG, seed=SEED,
    )  # fmt: skip
    assert found.percentile(0.99) == pytest.approx(expected, rel=0.06)
    # About 1 - rho of the jobs find the worker free and do not wait at all.
    zero = sum(1 for wait in found.waits if wait == 0) / len(found.waits)
    assert zero == pytest.approx(1 - rho, abs=0.01)


@pytest.mark.parametrize("cv", [0.0, 0.5, 2.0])
def test_one_server_with_any_spread_waits_as_pollaczek_khinchine_says(cv):
    # M/G/1: W = rho/(1-rho) · (1 + cs²)/2 · E[S], exact; Kingman's with ca = 1.
    expected = 0.8 / 0.2 * (1 + cv * cv) / 2
    assert mean_wait(1, 0.8, service_cv=cv) == pytest.approx(expected, rel=0.06)


@pytest.mark.parametrize("servers", [1, 2, 4])
def test_even_arrivals_and_equal_jobs_never_wait_below_full_load(servers):
    for rho in (0.5, 0.9, 0.99):
        found = simulate(
            utilisation=rho, servers=servers, mean_service=1.0, arrivals="fixed",
            service_cv=0.0, jobs=5000, seed=SEED,
        )  # fmt: skip
        assert found.percentile(0.99) == pytest.approx(0, abs=1e-9)
        assert found.arrival_rate == pytest.approx(servers * rho)


def test_a_bounded_queue_loses_what_m_m_1_k_loses():
    # One server and 2 waiting places: 3 in the system at most.
    rho, places = 0.8, 3
    expected = (1 - rho) * rho**places / (1 - rho ** (places + 1))
    found = simulate(
        utilisation=rho, servers=1, mean_service=1.0, arrivals="poisson",
        service_cv=1.0, jobs=LONG, seed=SEED, capacity=2,
    )  # fmt: skip
    assert found.dropped_share == pytest.approx(expected, rel=0.03)


def test_no_waiting_place_loses_what_erlang_b_loses_whatever_the_spread():
    # c places and no queue: the loss is Erlang B, and does not depend on the jobs'
    # distribution, only on their mean.
    servers, rho = 2, 0.5
    offered = servers * rho
    terms = [offered**k / math.factorial(k) for k in range(servers + 1)]
    expected = terms[-1] / sum(terms)
    for cv in (1.0, 0.0):
        found = simulate(
            utilisation=rho, servers=servers, mean_service=1.0, arrivals="poisson",
            service_cv=cv, jobs=LONG, seed=SEED, capacity=0,
        )  # fmt: skip
        assert found.dropped_share == pytest.approx(expected, rel=0.03), cv


def test_a_run_repeats_with_its_seed_and_changes_with_another():
    settings = {"utilisation": 0.8, "servers": 2, "mean_service": 1.0,
                "arrivals": "poisson", "service_cv": 1.0, "jobs": 2000}  # fmt: skip
    first = simulate(seed=1, **settings)  # type: ignore[arg-type]
    assert simulate(seed=1, **settings) == first  # type: ignore[arg-type]
    assert simulate(seed=2, **settings) != first  # type: ignore[arg-type]


# --- the labs' tables ---------------------------------------------------------------


@pytest.mark.parametrize("slug", SLUGS)
def test_the_defaults_are_the_course_deterministic_setting(slug):
    result = run(slug)
    assert {name: result["params"][name] for name in DETERMINISTIC} == DETERMINISTIC
    found = records(result, "variability")
    assert len(found) == (15 if slug == "worker-processes" else 5)
    suffix = "" if slug == "message-queues" else "_ms"
    for row in found:
        # Even arrivals, equal jobs: nobody waits, nothing waits, L = lambda W = 0 ...
        for name in ("mean_wait", "p50_wait", "p99_wait", "kingman_wait"):
            assert row[f"{name}{suffix}"] == 0, name
        assert row["measured_l"] == row["lambda_times_w"] == 0
        # ... while the same load with random arrivals would (the Erlang C column).
        assert float(str(row[f"erlang_c_wait{suffix}"])) > 0
        assert row["note"] == "stable"
    # The lab draws p50 and p99 against the load from this table.
    [chart] = [c for c in lab_get(slug).charts if c.table == "variability"]
    assert chart.values == (f"p50_wait{suffix}", f"p99_wait{suffix}")
    assert chart.label in result["tables"]["variability"]["columns"]


def test_message_queues_one_consumer_is_m_m_1_in_job_lengths():
    found = records(run("message-queues", **POISSON), "variability")
    assert [r["utilisation_pct"] for r in found] == [50, 70, 80, 90, 95]
    assert [r["erlang_c_wait"] for r in found] == [1, 2.333, 4, 9, 19]
    for row in found:
        rho = int(str(row["utilisation_pct"])) / 100
        assert row["kingman_wait"] == round(rho / (1 - rho), 3)
        # 20,000 jobs: within a fifth of the formula (the long runs above are tight).
        assert row["mean_wait"] == pytest.approx(row["erlang_c_wait"], rel=0.2)
        assert float(str(row["p50_wait"])) <= float(str(row["mean_wait"]))
        assert float(str(row["p99_wait"])) > 2 * float(str(row["mean_wait"]))


@pytest.mark.parametrize("slug", SLUGS)
@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_the_kingman_column_is_the_formula(slug, cv):
    lab = lab_get(slug)
    params = lab.validate(
        {"arrivals": "poisson", "service_cv": cv, "utilisations": [50, 90],
         "variability_jobs": 500}
    )  # fmt: skip
    found = records(lab.run(params), "variability")
    unit = "" if slug == "message-queues" else "_ms"
    digits = 3 if slug == "message-queues" else 1
    mean = {"message-queues": 1.0, "worker-processes": 100.0,
            "backpressure": 1000 / 60, "load-shedding": 300.0}[slug]  # fmt: skip
    for row in found:
        rho = int(str(row["utilisation_pct"])) / 100
        servers = int(str(row.get("workers", 2 if slug == "load-shedding" else 1)))
        factor = (1 + cv * cv) / 2
        if servers == 1:
            expected = rho / (1 - rho) * factor * mean
        else:  # several servers: Erlang C's wait times the same factor
            expected = textbook_erlang_c(servers, rho) * mean / (servers * (1 - rho))
            expected *= factor
        assert row[f"kingman_wait{unit}"] == pytest.approx(round(expected, digits))


@pytest.mark.parametrize("slug", SLUGS)
def test_little_s_law_holds_on_every_stable_run(slug):
    found = records(run(slug, **POISSON), "variability")
    assert found
    for row in found:
        measured, product = (
            float(str(row["measured_l"])),
            float(str(row["lambda_times_w"])),
        )
        # The same run counted two ways: by the clock (L) and per job (lambda W); only
        # jobs straddling the window's edges differ.
        assert measured == pytest.approx(product, rel=0.01, abs=0.002)


def test_more_workers_at_the_same_load_wait_less():
    found = {r["load"]: r for r in records(run("worker-processes", **POISSON),
                                           "variability")}  # fmt: skip
    for pct in (50, 70, 80, 90, 95):
        for column in ("erlang_c_wait_ms", "p99_wait_ms"):
            waits = [float(str(found[f"{n} at {pct}%"][column])) for n in (1, 2, 4)]
            assert waits[0] > waits[1] > waits[2], (pct, column)


@pytest.mark.parametrize(
    ("slug", "bound"),
    [("message-queues", None), ("backpressure", "tail_drop"),
     ("load-shedding", "shed")],
)  # fmt: skip
def test_a_load_at_or_above_full_is_reported_unstable(slug, bound):
    unit = "" if slug == "message-queues" else "_ms"
    waits = ("mean_wait", "p50_wait", "p99_wait", "kingman_wait", "erlang_c_wait")
    unbounded = [f"{name}{unit}" for name in waits] + ["measured_l", "lambda_times_w"]
    found = records(run(slug, utilisations=[90, 100, 130], **POISSON), "variability")
    stable, *unstable = found
    assert stable["note"] == "stable"
    assert all(stable[name] is not None for name in unbounded)
    for row in unstable:
        assert UNSTABLE in str(row["note"])
        assert all(row[name] is None for name in unbounded)
    if bound is None:
        return
    # A bound keeps the queue stable at any load: it refuses a growing share and
    # serves the rest within a wait the bound caps.
    shares = [float(str(row[f"{bound}_pct"])) for row in found]
    assert shares == sorted(shares)
    assert 0 < shares[1] < shares[2]
    p99 = "tail_drop_p99_wait_ms" if bound == "tail_drop" else "controlled_p99_wait_ms"
    assert all(isinstance(row[p99], int | float) for row in found)


def test_a_huge_bound_drops_nothing_and_changes_no_wait():
    found = records(run("backpressure", capacity=100_000, **POISSON), "variability")
    for row in found:
        assert row["tail_drop_pct"] == 0
        assert row["tail_drop_p99_wait_ms"] == row["p99_wait_ms"]


def test_a_stopped_consumer_has_no_load_to_measure():
    found = records(run("backpressure", consume_per_s=0, **POISSON), "variability")
    assert all(row["mean_wait_ms"] is None for row in found)
    assert all("stopped" in str(row["note"]) for row in found)


def test_the_course_tables_do_not_depend_on_the_variability_settings():
    for slug in SLUGS:
        course = run(slug)["tables"]
        random_run = run(slug, utilisations=[60], variability_jobs=300, seed=7,
                         **POISSON)["tables"]  # fmt: skip
        for name in course:
            if name != "variability":
                assert random_run[name] == course[name], (slug, name)


def test_the_command_line_takes_the_new_parameters():
    tables = lab_json(
        "load-shedding", "--set", "arrivals=poisson", "--set", "utilisations=80",
        "--set", "variability_jobs=1000",
    )["tables"]  # fmt: skip
    [row] = tables["variability"]["rows"]
    assert row[0] == 80
    assert row[-1] == "stable"


@pytest.mark.parametrize(
    ("slug", "name", "text", "needle"),
    [
        ("message-queues", "arrivals", "random", "arrivals: must be fixed or poisson"),
        ("backpressure", "service_cv", "-0.5", "service_cv: must be at least 0"),
        ("load-shedding", "service_cv", "5", "service_cv: must be at most 4"),
        ("worker-processes", "utilisations", "50,100", "must be at most 99, got 100"),
        ("message-queues", "utilisations", "0", "utilisations: must be at least 1"),
        ("backpressure", "utilisations", "201", "utilisations: must be at most 200"),
        ("load-shedding", "variability_jobs", "10", "must be at least 100"),
        ("message-queues", "variability_consumers", "0", "must be at least 1"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_in_one_line(slug, name, text, needle):
    with pytest.raises(ParamError) as refused:
        lab_get(slug).resolve({name: text})
    assert needle in str(refused.value)
    assert "\n" not in str(refused.value)
    assert_refused(slug, "--set", f"{name}={text}", needle=needle)

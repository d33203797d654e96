"""The explorable lesson page: its controls, and the model's answer for any
parameter set (``course.explore``, ``GET /course/<slug>/model.json``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from course import textbook
from course.compare import tables_compared
from course.explore import (
    controls_for,
    explore_refusal,
    explore_serve,
)
from course.forms import LabForm
from course.labs.harness.base import Lab
from course.labs.registry import LABS, lab_get
from course.models import LabRun
from course.policies import run_cost
from jobs.models import JobStatus

pytestmark = pytest.mark.django_db

URL = "/course/cache-layers/model.json"


@pytest.fixture
def fresh_models(tmp_path, settings) -> Iterator[None]:
    """A disk cache of model runs of this test's own: every set starts unkept."""
    settings.VAR_DIR = tmp_path
    textbook.model_cache_dir.cache_clear()
    yield
    textbook.model_cache_dir.cache_clear()


@contextmanager
def counted_model(lab: Lab[Any], *, delay_s: float = 0.0) -> Iterator[list[int]]:
    """Count (and optionally slow down) the model runs of ``lab``."""
    original = lab.model
    runs: list[int] = []

    def model(params, progress):
        runs.append(1)
        time.sleep(delay_s)
        return original(params, progress)

    object.__setattr__(lab, "model", model)
    try:
        yield runs
    finally:
        object.__setattr__(lab, "model", original)


# --- the controls ------------------------------------------------------------------


def _on_grid(value: float, low: float, step: float) -> bool:
    ratio = (value - low) / step
    return abs(ratio - round(ratio)) < 1e-6


@pytest.mark.parametrize("slug", sorted(LABS))
def test_every_parameter_gets_a_control_that_suits_it(slug, settings):
    lab = lab_get(slug)
    controls = controls_for(lab)
    assert [c.name for c in controls] == [p.name for p in lab.params]
    for param, control in zip(lab.params, controls, strict=True):
        assert control.default == param.text(param.default)
        if param.kind == "int_list":
            assert control.kind == "list"
            assert control.max_items == param.max_items
        elif param.kind == "str":
            assert control.kind in ("select", "text")
        elif control.kind == "slider":
            assert control.low is not None
            assert control.high is not None
            assert isinstance(param.default, int | float)
            default = float(param.default)
            # The default is a position of the slider, and the slider stays within
            # what the parameter accepts.
            assert control.low <= default <= control.high
            assert _on_grid(default, control.low, control.step), param.name
            assert param.maximum is None or control.high <= param.maximum
            assert (control.high - control.low) / control.step <= 1000
            # Sliding a size to its end never asks an anonymous learner to sign up.
            if param.work == "value":
                at_end = {**lab.defaults(), param.name: int(control.high)}
                assert run_cost(lab, at_end) <= settings.LAB_ANON_COST_PER_RUN
        else:
            assert control.kind == "stepper"
            assert param.kind == "int"


def test_the_kinds_of_control_chosen():
    kinds = {c.name: c.kind for c in controls_for(lab_get("message-queues"))}
    assert kinds["production"] == "slider"  # a bounded count with room to move
    assert kinds["variability_consumers"] == "stepper"  # a small count: 1 … 10
    assert kinds["seed"] == "stepper"  # an identifier, not a quantity
    assert kinds["consumers"] == "list"
    assert kinds["arrivals"] == "select"
    visibility = controls_for(lab_get("message-queues"))[0]
    assert visibility.name == "visibility"
    assert visibility.low is not None
    assert visibility.low > 0
    cut = controls_for(lab_get("server-sent-events"))[0]
    assert (cut.name, cut.kind) == ("cut", "stepper")  # 0 … 6
    select = next(
        c for c in controls_for(lab_get("worker-processes")) if c.name == "arrivals"
    )
    assert select.choices == ("fixed", "poisson")
    start = controls_for(lab_get("scheduled-tasks"))[0]
    assert (start.name, start.kind) == ("start", "text")
    delay = next(
        c
        for c in controls_for(lab_get("hot-key-and-stampede-effect"))
        if c.name == "origin_delay_ms"
    )
    # 30 ms that may be an hour: the slider reaches ten times the default.
    assert (delay.low, delay.high) == (0, 300)


def test_the_lesson_page_carries_the_controls_and_a_hidden_panel(client):
    html = client.get("/course/message-queues/").content.decode()
    assert 'id="explore-config"' in html
    assert "data-explore hidden" in html  # shown by explore.js only
    assert "/course/message-queues/model.json" in html
    # Without JavaScript the form is the plain one: one text field per parameter.
    assert 'name="consumers"' in html
    assert 'type="range"' not in html


# --- the answer ---------------------------------------------------------------------


def test_the_answer_is_the_models_tables_for_the_parameters(client, fresh_models):
    lab = lab_get("cache-layers")
    response = client.get(URL, {"requests": "700", "edge_capacity": "5"})
    assert response.status_code == 200
    body = response.json()
    params = lab.resolve({"requests": "700", "edge_capacity": "5"})
    assert body["tables"] == lab.run(params)["tables"]
    assert body["params"]["requests"] == "700"
    assert body["params"]["users"] == "40"  # left out: the default
    assert body["changed"] == ["requests", "edge_capacity"]
    assert body["charts"] == [chart.as_json() for chart in lab.charts]
    assert body["moved"] is None  # nothing to compare with yet
    assert response["X-Model-Source"] == "run"


@pytest.mark.parametrize(
    "values",
    [
        {"requests": "abc"},
        {"users": "0"},
        {"requests": "-1", "users": "x"},
        {"requests": "1" * 300},
        {"seed": "1.5"},
    ],
)
def test_parameters_are_read_as_the_run_form_reads_them(client, values):
    lab = lab_get("cache-layers")
    answer = client.get(URL, values)
    assert answer.status_code == 400
    assert answer["Cache-Control"] == "no-store"
    form = LabForm(lab, data=values)
    assert not form.is_valid()
    expected = {name: list(messages) for name, messages in form.errors.items()}
    assert answer.json() == {"errors": expected}
    # The run form says the same, word for word.
    posted = client.post(
        "/course/cache-layers/run", values, HTTP_ACCEPT="application/json"
    )
    assert posted.status_code == 400
    assert posted.json() == {"errors": expected}
    assert JobStatus.objects.count() == 0


def test_a_combination_the_lab_refuses_is_a_400(client):
    # message-queues checks the arrivals against its own list.
    answer = client.get("/course/message-queues/model.json", {"arrivals": "burst"})
    assert answer.status_code == 400
    assert "arrivals" in str(answer.json()["errors"])


def test_empty_and_unknown_values_keep_the_defaults(client):
    defaults = client.get(URL).json()
    same = client.get(URL, {"requests": "", "live": "on", "prediction": "3", "x": "1"})
    assert same.status_code == 200
    assert same.json()["key"] == defaults["key"]
    assert same.json()["changed"] == []
    assert defaults["tables"] == textbook.default_tables("cache-layers")


def test_an_answer_is_kept_and_revalidated_by_its_etag(client, fresh_models):
    lab = lab_get("cache-layers")
    first = client.get(URL, {"requests": "640"})
    etag = first["ETag"]
    assert first["Cache-Control"] == "public, max-age=300"
    assert first["X-Model-Source"] == "run"
    with counted_model(lab) as runs:
        again = client.get(URL, {"requests": "640"})
        assert again["X-Model-Source"] == "memory"
        assert again["ETag"] == etag
        held = client.get(URL, {"requests": "640"}, HTTP_IF_NONE_MATCH=etag)
        assert held.status_code == 304
        assert held.content == b""
        assert held["ETag"] == etag
        other = client.get(URL, {"requests": "641"})
        assert other["ETag"] != etag
        # Another process (its memory empty) reads the run from the disk.
        textbook._memory.clear()
        from_disk = client.get(URL, {"requests": "640"})
        assert from_disk["X-Model-Source"] == "disk"
        assert from_disk.json()["tables"] == first.json()["tables"]
    assert runs == [1]  # only 641 ran


def test_moved_figures_are_the_compare_pages(client, fresh_models):
    first = client.get(URL, {"requests": "700"}).json()
    second = client.get(URL, {"requests": "900", "since": first["key"]})
    body = second.json()
    assert body["since"] == first["key"]
    expected = {
        pair.name: sorted(pair.moved)
        for pair in tables_compared(first["tables"], body["tables"])
    }
    assert {
        name: [(r, c) for r, c, _ in cells] for name, cells in body["moved"].items()
    } == expected
    assert any(expected.values())
    # Each moved cell carries the value it had before.
    for name, cells in body["moved"].items():
        for r, c, before in cells:
            assert first["tables"][name]["rows"][r][c] == before
    # The ETag names the comparison too.
    assert second["ETag"] != client.get(URL, {"requests": "900"})["ETag"]
    # A previous set nobody ran, or not a key at all: no marks, no error.
    unknown = client.get(URL, {"requests": "900", "since": "0" * 24}).json()
    assert unknown["moved"] is None
    assert unknown["reshaped"] is None
    hostile = client.get(URL, {"requests": "900", "since": "../../etc/passwd"})
    assert hostile.status_code == 200
    assert hostile.json()["moved"] is None
    assert hostile.json()["since"] is None


def test_a_row_that_went_is_said_not_marked(client):
    url = "/course/hot-key-and-stampede-effect/model.json"
    both = client.get(url).json()
    one = client.get(url, {"copies": "4", "since": both["key"]}).json()
    assert both["reshaped"] is None  # nothing before it
    gone = [
        name
        for name, table in both["tables"].items()
        if len(table["rows"]) == len(one["tables"][name]["rows"]) + 1
    ]
    assert gone
    assert one["reshaped"] == [f"{name}: 1 row fewer" for name in gone]
    back = client.get(url, {"since": one["key"]}).json()
    assert back["reshaped"] == [f"{name}: 1 row more" for name in gone]
    # The row that came back is new: its cells count as moved.
    assert all(back["moved"][name] for name in gone)
    none = client.get(url, {"copies": "none", "since": both["key"]}).json()
    assert none["reshaped"] == [f"{name}: 2 rows fewer" for name in gone]


def test_exploring_records_nothing_and_starts_no_session(client, fresh_models):
    for requests in ("610", "620", "630"):
        answer = client.get(URL, {"requests": requests})
        assert answer.status_code == 200
    assert JobStatus.objects.count() == 0
    assert LabRun.objects.count() == 0
    assert "sessionid" not in client.cookies


# --- protecting the web process -------------------------------------------------------


HEAVY = {"requests": "100000"}  # about 167 default runs


def test_a_costly_set_needs_an_account(client, fresh_models, redis_client):
    lab = lab_get("cache-layers")
    assert run_cost(lab, lab.resolve(HEAVY)) > 5
    with counted_model(lab) as runs:
        refused = client.get(URL, HEAVY)
    assert runs == []
    assert refused.status_code == 403
    body = refused.json()
    assert body["refusal"] == "needs account"
    assert "Sign up" in body["error"]
    assert "167" in body["error"]
    assert body["signup_url"] == "/accounts/signup/"
    assert refused["Cache-Control"] == "no-store"
    assert "Cookie" in refused["Vary"]

    user = get_user_model().objects.create_user("explorer", password="pw-explorer-1")
    signed_in = Client()
    signed_in.force_login(user)
    answer = signed_in.get(URL, HEAVY)
    assert answer.status_code == 200
    assert answer.json()["params"]["requests"] == "100000"
    # Beyond a learner's own per-run budget: refused as the run form refuses it.
    beyond = {"requests": "200000"}  # about 333 default runs
    assert run_cost(lab, lab.resolve(beyond)) > 250
    with counted_model(lab) as runs:
        too_heavy = signed_in.get(URL, beyond)
    assert runs == []
    assert too_heavy.status_code == 400
    assert too_heavy.json()["refusal"] == "too heavy"
    posted = signed_in.post(
        "/course/cache-layers/run", beyond, HTTP_ACCEPT="application/json"
    )
    assert posted.json()["error"] == too_heavy.json()["error"]


def test_refusal_asks_nothing_of_the_session_for_a_cheap_set():
    lab = lab_get("cache-layers")

    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError("the user was read")

    assert explore_refusal(lab, lab.defaults(), Untouchable()) is None  # type: ignore[arg-type]


def test_new_sets_are_limited_per_minute_and_kept_ones_are_not(
    client, fresh_models, redis_client, settings
):
    settings.LAB_EXPLORE_RUNS_PER_MINUTE = 3
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)  # the four requests in one window
    for requests in ("701", "702", "703"):
        assert client.get(URL, {"requests": requests}).status_code == 200
    refused = client.get(URL, {"requests": "704"})
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "3 new parameter sets" in refused.json()["error"]
    assert refused["Cache-Control"] == "no-store"
    # What was already run is answered at once, and costs nothing.
    kept = client.get(URL, {"requests": "702"})
    assert kept.status_code == 200
    assert kept["X-Model-Source"] == "memory"
    # Another address has a minute of its own; so has a signed-in learner.
    assert (
        client.get(URL, {"requests": "704"}, REMOTE_ADDR="10.1.2.3").status_code == 200
    )
    user = get_user_model().objects.create_user("counted", password="pw-counted-1")
    signed_in = Client()
    signed_in.force_login(user)
    assert signed_in.get(URL, {"requests": "705"}).status_code == 200


def test_one_run_per_set_however_many_ask_at_once(fresh_models, redis_client):
    lab = lab_get("cache-layers")
    params = lab.resolve({"requests": "777"})
    answers: list[Any] = []
    with counted_model(lab, delay_s=0.3) as runs:
        threads = [
            threading.Thread(
                target=lambda: answers.append(
                    explore_serve(lab, params, who=lambda: "addr:test")
                )
            )
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert runs == [1]
    assert len(answers) == 4
    assert len({answer.key for answer in answers}) == 1
    assert sorted(answer.source for answer in answers).count("run") == 1


# --- without JavaScript --------------------------------------------------------------


def test_the_form_still_posts_a_run_without_javascript(client, redis_client):
    page = client.get("/course/cache-layers/").content.decode()
    assert 'action="/course/cache-layers/run"' in page
    answer = client.post("/course/cache-layers/run", {"requests": "700"})
    assert answer.status_code == 303
    assert answer["Location"].startswith("/course/cache-layers/?job=")
    job = JobStatus.objects.get()
    assert job.params["requests"] == 700
    assert LabRun.objects.count() == 1


def test_a_process_runs_one_model_at_a_time_and_says_when_busy(
    client, fresh_models, redis_client, settings, monkeypatch
):
    """New sets take turns for the process's model runs (CPU-bound Python shares one
    interpreter lock with the pages); one that waits too long is a 503."""
    from course import explore

    settings.LAB_EXPLORE_RUNS_AT_ONCE = 1
    lab = lab_get("cache-layers")
    original = lab.model
    running: list[int] = []
    most: list[int] = [0]

    def model(params, progress):
        running.append(1)
        most[0] = max(most[0], len(running))
        time.sleep(0.3)
        running.pop()
        return original(params, progress)

    holding, release = threading.Event(), threading.Event()
    object.__setattr__(lab, "model", model)
    try:
        threads = [
            threading.Thread(
                target=explore_serve,
                args=(lab, lab.resolve({"requests": str(800 + n)})),
                kwargs={"who": lambda: "addr:turns"},
            )
            for n in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert most[0] == 1  # three sets, one after the other

        monkeypatch.setattr(explore, "RUN_WAIT_S", 0.05)

        def held(params, progress):
            holding.set()
            release.wait(60)
            return original(params, progress)

        object.__setattr__(lab, "model", held)
        slow = threading.Thread(
            target=explore_serve,
            args=(lab, lab.resolve({"requests": "900"})),
            kwargs={"who": lambda: "addr:turns"},
        )
        slow.start()
        assert holding.wait(60)  # the slow set has the process's one slot
        busy = client.get(URL, {"requests": "901"})
        release.set()
        slow.join()
    finally:
        release.set()
        object.__setattr__(lab, "model", original)
    assert busy.status_code == 503
    assert busy["Retry-After"] == "2"
    assert "busy" in busy.json()["error"]
    assert client.get(URL, {"requests": "901"}).status_code == 200  # its turn came


@pytest.mark.processes
def test_new_sets_run_in_a_worker_process_that_comes_back_when_killed(
    transactional_db, redis_client
):
    """In production a daphne hands new sets to a worker process of its own
    (course.model_pool), started when a lesson page is shown. Killed, it is
    replaced, and the page's next new set is answered."""
    import httpx

    from config.processes import (
        child_environment,
        free_port,
        start_daphne,
        stop,
        wait_until,
    )

    port = free_port()
    server = start_daphne(
        port, {**child_environment(DEBUG="true"), "LIBRARY_LAB_EXPLORE_PROCESSES": "1"}
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert httpx.get(f"{base}/course/cache-layers/").status_code == 200
        worker = wait_until(lambda: _model_worker(server.pid), "the model worker")
        seed = 1_000_000 + os.getpid() % 1_000_000  # sets nobody ran before
        first = httpx.get(f"{base}{URL}", params={"seed": seed}, timeout=60)
        assert first.status_code == 200
        assert first.headers["X-Model-Source"] == "run"
        assert _model_worker(server.pid) == worker  # the same worker ran it

        os.kill(worker, signal.SIGKILL)

        def answered() -> httpx.Response | None:
            # A 503 (the worker died under it) says to retry: the page does.
            answer = httpx.get(f"{base}{URL}", params={"seed": seed + 1}, timeout=60)
            return answer if answer.status_code == 200 else None

        assert wait_until(answered, "an answer from a new worker").json()["tables"]
        assert _model_worker(server.pid) not in (None, worker)
    finally:
        stop(server)


def _model_worker(pid: int) -> int | None:
    """The daphne's model worker: a child started by multiprocessing's spawn."""
    for child in Path(f"/proc/{pid}/task").glob("*/children"):
        for found in child.read_text().split():
            command = Path(f"/proc/{found}/cmdline").read_bytes()
            if b"spawn_main" in command:
                return int(found)
    return None


def test_model_answers_are_shed_before_pages_under_overload():
    from jobs.shedding_policy import Priority, route_class

    # The lesson reads without them; the page asks again after Retry-After.
    assert route_class(URL) == Priority.LOW
    assert route_class("/course/cache-layers/") == Priority.NORMAL


def test_the_disk_cache_is_swept_to_its_bound_oldest_first(fresh_models):
    current = textbook.model_cache_dir()
    current.mkdir(parents=True)
    old_version = current.parent / "0123456789abcdef"
    old_version.mkdir()
    (old_version / "cache-layers-old.json").write_text("{}")
    for age, name in enumerate(("newest", "middle", "oldest")):
        path = current / f"cache-layers-{name}.json"
        path.write_text("x" * 100)
        os.utime(path, (1_000_000 - age * 60, 1_000_000 - age * 60))
    crashed = current / ".cache-layers-newest.json.1.2.tmp"
    crashed.write_text("half")
    os.utime(crashed, (1_000_000 - 7200, 1_000_000 - 7200))

    removed = textbook.model_cache_sweep(max_bytes=250, now=1_000_000)

    assert removed == 3  # the old version's file, the crashed write, the oldest
    assert not old_version.exists()
    assert sorted(p.name for p in current.iterdir()) == [
        "cache-layers-middle.json",
        "cache-layers-newest.json",
    ]
    assert textbook.model_cache_sweep(max_bytes=250, now=1_000_000) == 0

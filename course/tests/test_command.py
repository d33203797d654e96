import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course.labs.registry import LABS
from course.tests.labs.lab_results import lab_command as lab

ROOT = Path(__file__).resolve().parents[2]


def test_without_arguments_lists_labs():
    status, out, _ = lab()
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["lab", "title", "model", "live"]
    assert any(line.startswith("message-queues") and line.split()[-2:] == ["yes", "yes"]
               for line in lines)  # fmt: skip
    assert len(lines) == 1 + len(LABS)
    assert any(line.startswith("message-queues") for line in lines)


def test_json_is_one_object_with_numbers():
    status, out, err = lab("cache-layers", "--json")
    assert status == 0
    assert err == ""
    data = json.loads(out)  # fails if anything else is on stdout
    assert list(data) == ["lesson", "params", "tables"]
    assert data["lesson"] == "cache-layers"
    assert data["params"]["requests"] == 600
    assert data["tables"]["chain"]["rows"][0] == ["client", 98, 16.3]
    assert '"16.3"' not in out
    assert "98.0" not in out


def test_set_overrides_and_list_values():
    status, out, _ = lab(
        "message-queues", "--json", "--set", "consumers=1,4", "--set", "visibility=45"
    )
    assert status == 0
    data = json.loads(out)
    assert data["params"]["consumers"] == [1, 4]
    assert data["params"]["visibility"] == 45
    assert data["tables"]["depth"]["rows"] == [[1, "2 4 6 8 10 12"], [4, "0 0 0 0 0 0"]]
    assert data["tables"]["unacknowledged"]["rows"][3][0] == 45


def test_text_output_is_aligned_tables():
    status, out, _ = lab("cache-layers")
    assert status == 0
    assert "[chain]" in out
    assert "client        98       16.3" in out


def test_params_listing():
    status, out, _ = lab("message-queues", "--params")
    assert status == 0
    assert "visibility" in out
    assert "> 0" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nope"], "no lab named 'nope'"),
        (["cache-layers", "--set", "nope=1"], "has no parameter 'nope'"),
        (["cache-layers", "--set", "requests=lots"], "'lots' is not a whole number"),
        (["message-queues", "--set", "visibility=0"], "must be greater than 0"),
        (["cache-layers", "--set", "requests"], "--set needs NAME=VALUE"),
        # What only the model runs is refused before anything starts.
        (
            ["cache-layers", "--set", "server_capacity=0", "--live"],
            "server_capacity: 0 (server cache off) runs in the model only",
        ),
        (
            ["cache-layers", "--json", "--live", "--set", "server_capacity=0"],
            "the live server always caches",
        ),
    ],
)
def test_errors_are_one_line_and_status_2(args, needle):
    status, out, err = lab(*args)
    assert status == 2
    assert out == ""
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    # os.environ holds this run's Redis database already (settings_test, per worker).
    env = {**os.environ, "DEBUG": "true"}
    return subprocess.run(
        [sys.executable, "manage.py", "lab", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.processes
def test_real_process_json_and_error_exit_status():
    done = _manage("message-queues", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["tables"]["competing"]["rows"][0] == [
        "consumer-1",
        4,
    ]
    failed = _manage("message-queues", "--set", "visibility=-1")
    assert failed.returncode == 2
    assert failed.stdout == ""
    assert "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines() == [
        "lab: visibility: must be greater than 0, got -1"
    ]

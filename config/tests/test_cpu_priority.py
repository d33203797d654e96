"""A lab's session group is lowered, and what it starts stays in it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from config.processes import ROOT

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists(), reason="no autogroups on this kernel"
)

# Runs in a session of its own, like a lab worker under honcho or systemd; lowers
# its group (or not), starts a child as the labs do, reports both processes' groups.
SCRIPT = """
import json, subprocess, sys
from config.cpu_priority import autogroup_nice, child_group_options, lower_own_autogroup
if sys.argv[1] == "lower":
    lower_own_autogroup(19)
child = subprocess.Popen(
    [sys.executable, "-c", "print(open('/proc/self/autogroup').read().split()[0])"],
    stdout=subprocess.PIPE, text=True, **child_group_options(),
)
own = open("/proc/self/autogroup").read().split()[0]
theirs = child.communicate()[0].strip()
print(json.dumps({"own": own, "nice": autogroup_nice(), "child": theirs}))
"""


def run_in_own_session(mode: str) -> dict[str, object]:
    answer = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=True,
        timeout=60,
    )
    return dict(json.loads(answer.stdout))


def test_a_lowered_group_keeps_its_children():
    seen = run_in_own_session("lower")
    assert seen["nice"] == 19
    assert seen["child"] == seen["own"]


def test_an_ordinary_process_gives_its_children_groups_of_their_own():
    seen = run_in_own_session("keep")
    assert seen["nice"] == 0
    assert seen["child"] != seen["own"]


def test_a_process_that_does_not_lead_its_session_leaves_the_group_alone():
    # Started in this test's session: lowering would lower the test runner too.
    answer = subprocess.run(
        [
            sys.executable,
            "-c",
            "from config.cpu_priority import autogroup_nice, lower_own_autogroup;"
            "lower_own_autogroup(19); print(autogroup_nice())",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert answer.stdout.strip() == str(
        int(Path("/proc/self/autogroup").read_text().split()[-1])
    )

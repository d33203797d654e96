"""A lab's session group is lowered, and what it starts stays in it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from config import cpu_priority
from config.processes import ROOT

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists(), reason="no autogroups on this kernel"
)

# Runs in a session of its own, as the Procfile (exec) and systemd run a lab worker;
# lowers its group (or not), starts a child as the labs do, reports both groups.
SCRIPT = """
import json, subprocess, sys
from config.cpu_priority import autogroup_nice, child_group_options, lower_own_autogroup
if sys.argv[1] == "lower":
    assert lower_own_autogroup(19)
child = subprocess.Popen(
    [sys.executable, "-c", "print(open('/proc/self/autogroup').read().split()[0])"],
    stdout=subprocess.PIPE, text=True, **child_group_options(),
)
own = open("/proc/self/autogroup").read().split()[0]
theirs = child.communicate()[0].strip()
print(json.dumps({"own": own, "nice": autogroup_nice(), "child": theirs}))
"""


def python_output(code: str, *args: str, own_session: bool) -> str:
    answer = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        start_new_session=own_session,
        check=True,
        timeout=60,
    )
    return answer.stdout.strip()


def run_in_own_session(mode: str) -> dict[str, object]:
    return dict(json.loads(python_output(SCRIPT, mode, own_session=True)))


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
    printed = python_output(
        "from config.cpu_priority import autogroup_nice, lower_own_autogroup;"
        "print(lower_own_autogroup(19), autogroup_nice())",
        own_session=False,
    )
    # Refused (run_below_the_library then warns), and the group is as it was. The
    # runner's own session may be the kernel's first, which is no autogroup and whose
    # file is empty (a CI machine's): then the child reads None too.
    assert printed == f"False {cpu_priority.autogroup_nice()}"


def test_an_empty_autogroup_file_means_no_group_to_keep(tmp_path, monkeypatch):
    # What a task in the kernel's first session, or in a cgroup of its own, reads.
    empty = tmp_path / "autogroup"
    empty.write_text("")
    monkeypatch.setattr(cpu_priority, "AUTOGROUP", empty)
    assert cpu_priority.autogroup_nice() is None
    assert cpu_priority.child_group_options() == {"start_new_session": True}

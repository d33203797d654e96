"""The process toolkit: command lines, waits, and a stop that reaches a whole family."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from config.processes import (
    ROOT,
    WaitTimeout,
    await_until,
    children,
    daphne_command,
    descendants,
    free_port,
    kill,
    manage_command,
    process_gone,
    start,
    stop,
    wait_until,
)

# A parent that forks a child which leaves its group, as rq's work-horse does
# (setpgrp): a signal to the parent's group does not reach it.
HORSE = """
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setpgrp()
    time.sleep(120)
    os._exit(0)
# Both sides set the group, as shells do: it holds before the pid is printed,
# whichever of the two runs first.
os.setpgid(pid, pid)
print(pid, flush=True)
time.sleep(120)
"""


def test_the_command_lines_name_this_interpreter_and_the_project():
    assert manage_command("check") == [sys.executable, str(ROOT / "manage.py"), "check"]
    assert daphne_command(8123) == [
        sys.executable,
        *("-m", "daphne", "-b", "127.0.0.1", "-p", "8123"),
        "config.asgi:application",
    ]
    assert "--proxy-headers" in daphne_command(8123, proxy_headers=True)
    assert 1024 < free_port() < 65536


def test_a_wait_returns_the_condition_value_or_names_what_it_waited_for():
    values = iter([None, 0, 7])
    assert wait_until(lambda: next(values), "the third value", interval=0) == 7
    with pytest.raises(WaitTimeout, match=r"waited 0\.05 s for nothing"):
        wait_until(lambda: False, "nothing", timeout=0.05, interval=0.01)

    def dead() -> None:
        raise RuntimeError("the child is dead")

    with pytest.raises(RuntimeError, match="dead"):
        wait_until(lambda: False, "a dead child's answer", alive=dead)


def test_an_async_wait_lets_the_loop_make_the_condition_true():
    async def scenario() -> str:
        box: list[str] = []
        asyncio.get_running_loop().call_later(0.05, box.append, "done")
        return await await_until(lambda: box[0] if box else None, "the callback")

    assert asyncio.run(scenario()) == "done"


@pytest.mark.processes
@pytest.mark.each_database
@pytest.mark.parametrize("end", [stop, kill])
def test_stopping_reaches_a_child_that_left_the_group(end):
    process = start(
        [sys.executable, "-c", HORSE], env=dict(os.environ), stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    horse = int(process.stdout.readline())
    assert children(process.pid) == [horse]
    assert horse in descendants(process.pid)
    assert os.getpgid(horse) != os.getpgid(process.pid)
    if end is stop:
        stop(process, grace=0.5)
    else:
        kill(process)
    assert process.returncode is not None
    wait_until(lambda: process_gone(horse), "the horse to die", timeout=10)

"""Where a process's CPU weight comes from on Linux, and how the labs lower theirs.

Where the kernel groups tasks by session ("autogroup", the default on desktops and
many servers), the CPU is shared between the groups first and only then between the
tasks inside a group: a task's nice value and scheduling class weigh only against
its own session. Each session's group starts with the weight of nice 0, so a lab's
processes, each in a session of its own, would each weigh as much as the web server
however niced they were. ``config.processes.run_below_the_library`` lowers the lab
process's own group, and ``child_group_options`` keeps its children inside it.

No Django here: the embedded Redis server is started while the settings load.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

AUTOGROUP: Final = Path("/proc/self/autogroup")
# A group's lowest weight: nice 19 (15, against 1024 for a group at nice 0).
AUTOGROUP_LOWEST_NICE: Final = 19


def lower_own_autogroup(nice: int) -> bool:
    """Set this session's autogroup to ``nice`` if this process leads the session.

    Return False where there are autogroups but this one was left alone.
    """
    if not AUTOGROUP.exists():
        return True  # no autogroups here: nice and class already weigh machine-wide
    # Only a session leader's group is its own: another process's session (the
    # shell of a terminal) may hold the library's servers too.
    if os.getsid(0) != os.getpid():
        return False
    try:
        AUTOGROUP.write_text(str(nice))
    except OSError:  # refused (a container's read-only /proc)
        return False
    return True


def autogroup_nice(pid: int | None = None) -> int | None:
    """The nice value of the session group of this process (or of ``pid``).

    None where there are no autogroups, and where the file is empty: a task in the
    kernel's first session, or in a CPU cgroup of its own, is in no session group.
    """
    path = AUTOGROUP if pid is None else Path(f"/proc/{pid}/autogroup")
    try:
        return int(path.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def child_group_options() -> dict[str, Any]:
    """Popen options giving a child a process group of its own.

    Below the library (its session group lowered), the child stays in this session,
    and so in the lowered group. Elsewhere it gets a session of its own.
    """
    if (autogroup_nice() or 0) > 0:
        return {"process_group": 0}
    return {"start_new_session": True}

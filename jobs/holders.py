"""Whether the process named by a lease's owner token still runs.

Every lease of the project names its holder the same way, ``host:pid:suffix``
(``jobs.locks.new_owner_token``, the messaging drain's owner, a partition's lease):
readable, and enough to answer the operator's first question about a lease that
does not move: is its holder still alive?

The answer is sure only for a holder on this host: its pid is looked up in
``/proc``. A pid that runs may be the holder or a later process that was given the
same number, so "alive" means "cannot be shown dead", and an operator action that
breaks a lease must refuse it. A holder on another host is ``unknown``: this
process cannot see it, and must not guess.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Liveness(StrEnum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class HolderState:
    """What can be said about a holder, with the sentence to show the operator."""

    liveness: Liveness
    explanation: str

    @property
    def dead(self) -> bool:
        return self.liveness is Liveness.DEAD


def token_host_pid(token: str) -> tuple[str, int] | None:
    """Return the host and pid a ``host:pid:suffix`` token names, or None."""
    parts = token.split(":")
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def pid_running(pid: int) -> bool:
    """Return whether ``pid`` is a process on this host that has not exited.

    A zombie (exited, not yet reaped by its parent) has exited.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return True  # it exists; we may not read it
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in {"Z", "X"}


def holder_state(token: str) -> HolderState:
    """Return whether the holder named by ``token`` runs, as far as can be told."""
    named = token_host_pid(token)
    if named is None:
        return HolderState(
            Liveness.UNKNOWN, f"{token!r} names no host and process id to look up"
        )
    host, pid = named
    if host != socket.gethostname():
        return HolderState(
            Liveness.UNKNOWN,
            f"the holder runs on {host}, not on this host: it cannot be looked up "
            "from here",
        )
    if pid_running(pid):
        return HolderState(
            Liveness.ALIVE, f"process {pid} is running on this host ({host})"
        )
    return HolderState(
        Liveness.DEAD, f"process {pid} is not running on this host ({host})"
    )

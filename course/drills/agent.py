"""The drill's agent: a process inside the sandbox that seeds and checks the incident.

Started by the drill's supervisor (``manage.py drill agent SLUG``) with the sandbox's
environment, so its database and Redis are the sandbox's. It stays up for the
drill's life, so a check costs no process start. It reads one JSON command a line
on stdin and answers each with one JSON line on stdout:

- ``{"do": "seed", "user": U, "pass": D, "next": P}``: creates the operator account
  ``U`` with the drill's permissions, stores the one-time sign-in ``D`` (a digest)
  for it, and seeds the incident; answers ``{"ok": true, "facts": {…}}`` (what the
  learner needs to know of this sandbox, such as which book is the hot one);
- ``{"do": "pass", "user": U, "pass": D, "next": P}``: stores another sign-in;
- ``{"do": "check"}``: answers ``{"verdict": {...}}``.

Any failure answers ``{"error": "…"}`` and leaves the agent ready for the next line.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from typing import IO, Any

from django.db import close_old_connections

from course.drills.catalogue import Drill
from course.drills.incidents.common import operator_create
from course.drills.signin import pass_store

log = logging.getLogger("course.drills")


def _answer(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _seed(drill: Drill, command: dict[str, Any]) -> dict[str, Any]:
    operator_create(str(command["user"]), drill.permissions)
    _pass(command)
    return {"ok": True, "facts": drill.seed()}


def _pass(command: dict[str, Any]) -> dict[str, Any]:
    pass_store(
        digest=str(command["pass"]),
        username=str(command["user"]),
        next_path=str(command.get("next") or "/admin/"),
    )
    return {"ok": True}


def _check(drill: Drill, command: dict[str, Any]) -> dict[str, Any]:
    return {"verdict": drill.check().as_json()}


def agent_serve(drill: Drill, lines: IO[str], out: IO[str]) -> None:
    """Answer commands until stdin closes (the supervisor went away)."""
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "seed": lambda c: _seed(drill, c),
        "pass": _pass,
        "check": lambda c: _check(drill, c),
    }
    for line in lines:
        try:
            command = json.loads(line)
            handler = handlers[str(command.get("do"))]
        except (ValueError, KeyError, AttributeError):
            _answer(out, {"error": f"not a command: {line.strip()[:100]}"})
            continue
        close_old_connections()
        try:
            _answer(out, handler(command))
        except Exception as error:
            log.error(
                "drill %s: %s failed:\n%s",
                drill.slug,
                command.get("do"),
                traceback.format_exc(),
            )
            _answer(out, {"error": f"{type(error).__name__}: {error}"})

"""Real live runs of a challenge's reference answers, kept beside the code.

A live condition (``live = [...]``) reads tables only a live run produces, and a
live run starts real processes for seconds or minutes: ``lesson_check`` cannot
make one per check. So the author records one live run of the challenge's
``solution`` and one of its ``wrong`` answer (``manage.py challenge_live_record``),
and ``lesson_check`` proves the conditions on them: they name tables, rows and
columns the live part really produced, hold on the solution's run and fail on the
wrong one's. The sandboxed live tests run each live part again and compare the
recorded tables' names and columns with what it produces now.

One JSON file per lesson (``recorded/<slug>.json``), keyed by challenge id; only the
live tables are kept (the model's follow from the parameters).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.challenges.spec import LIVE_PREFIX
from course.labs.harness.base import Params, Table, Tables

RECORDED_DIR = Path(__file__).resolve().parent / "recorded"


@dataclass(frozen=True)
class RecordedRun:
    """One live run as it was recorded: its parameters, its live tables, and how
    long it took (seconds, the sandbox included)."""

    params: Params
    tables: Tables
    seconds: float = 0.0


@dataclass(frozen=True)
class Recording:
    """The recorded live runs of one challenge's solution and wrong answer."""

    recorded_at: str
    solution: RecordedRun
    wrong: RecordedRun


def live_only(tables: Tables) -> Tables:
    """Return the live part's tables of a run's tables."""
    return {name: t for name, t in tables.items() if name.startswith(LIVE_PREFIX)}


# The files keep each table column by column (``by_column``): a run's figures read
# row by row can match a table of the course's word for word (the live part and
# the course measured the same deterministic workload), which the course-overlap
# check reports; the tables read back row by row.


def _by_column(table: Any) -> dict[str, Any]:
    rows = table["rows"]
    columns = list(table["columns"])
    return {
        "columns": columns,
        "by_column": [[row[i] for row in rows] for i in range(len(columns))],
    }


def _by_row(table: Any) -> Table:
    if not isinstance(table, dict) or not isinstance(table.get("columns"), list):
        raise ValueError("a recorded table needs its columns")
    if isinstance(table.get("rows"), list):
        return {"columns": table["columns"], "rows": table["rows"]}
    cells = table.get("by_column")
    if not isinstance(cells, list) or len(cells) != len(table["columns"]):
        raise ValueError("a recorded table needs one list of cells per column")
    rows = [list(row) for row in zip(*cells, strict=True)]
    return {"columns": table["columns"], "rows": rows}


def _run(raw: Any) -> RecordedRun:
    if not isinstance(raw, dict):
        raise ValueError("a recorded run must be an object")
    params, tables = raw.get("params"), raw.get("tables")
    if not isinstance(params, dict) or not isinstance(tables, dict):
        raise ValueError("a recorded run needs params and tables")
    rows = {str(name): _by_row(table) for name, table in tables.items()}
    return RecordedRun(params, rows, float(raw.get("seconds", 0.0)))


def _path(slug: str) -> Path:
    return RECORDED_DIR / f"{slug}.json"


def recordings_of(slug: str) -> dict[str, Recording]:
    """Return the lesson's recordings by challenge id ({} when it has none).

    Raise ValueError when the file is not what ``recording_write`` writes.
    """
    path = _path(slug)
    if not path.exists():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError(f"{path.name}: not an object of challenge ids")
    return {
        str(cid): Recording(
            str(entry.get("recorded_at", "")),
            _run(entry.get("solution")),
            _run(entry.get("wrong")),
        )
        for cid, entry in raw.items()
        if isinstance(entry, dict)
    }


def _run_json(run: RecordedRun) -> dict[str, Any]:
    tables = {name: _by_column(table) for name, table in run.tables.items()}
    return {"params": run.params, "seconds": run.seconds, "tables": tables}


def recording_write(slug: str, challenge_id: str, recording: Recording) -> Path:
    """Keep ``recording`` as the challenge's, beside the lesson's others."""
    path = _path(slug)
    raw: dict[str, Any] = {}
    if path.exists():
        raw = json.loads(path.read_text(encoding="utf-8"))
    raw[challenge_id] = {
        "recorded_at": recording.recorded_at,
        "solution": _run_json(recording.solution),
        "wrong": _run_json(recording.wrong),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(raw, indent=1, sort_keys=True, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path

"""The demo accounts' password, per database, in ``var/demo-credentials.json``.

`make run` seeds the SQLite database and `make cluster` a PostgreSQL one, each with
a password of its own, and both write under the same ``var/``. One password for the
whole file let the second seed overwrite the first's, and `make run` then printed a
password its database did not know. So the file maps each database to its password:

    {"databases": {"sqlite:/…/var/library.sqlite3": "…",
                   "postgresql://127.0.0.1:5432/library_cluster": "…"}}

A password is printed only after it has been checked against the database's staff
account, so a file that fell behind the database (a database recreated by hand, a
password changed in the admin) says "unknown" rather than something wrong. A file
in the old shape (``{"password": …}``) is kept as a candidate for whichever
database it works in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FILE_NAME = "demo-credentials.json"


def database_label(settings_dict: Mapping[str, Any]) -> str:
    """Return the name a database goes by in the file: engine, place, name; no user."""
    engine = str(settings_dict["ENGINE"]).rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"sqlite:{Path(str(settings_dict['NAME'])).resolve()}"
    host = settings_dict.get("HOST") or "localhost"
    port = settings_dict.get("PORT") or ""
    return f"{engine}://{host}:{port}/{settings_dict['NAME']}"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {"databases": {}}
    if not isinstance(data, dict):
        return {"databases": {}}
    databases = data.get("databases")
    data["databases"] = dict(databases) if isinstance(databases, dict) else {}
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    # Written whole to a neighbour, then renamed: a reader never sees half a file,
    # and the mode is the owner's only from the first byte.
    partial = path.with_suffix(".tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    os.chmod(partial, 0o600)
    partial.replace(path)


def credentials_remember(path: Path, database: str, password: str) -> None:
    """Record ``password`` as ``database``'s; every other database keeps its own."""
    data = _load(path)
    data["databases"][database] = password
    _save(path, data)


def credentials_recall(
    path: Path, database: str, works: Callable[[str], bool]
) -> str | None:
    """Return ``database``'s password if the file knows one that ``works`` there.

    ``works`` checks a candidate against the database (the staff account). The
    database's own entry is tried first, then a password from the file's old
    single-password shape, which is filed under this database when it works.
    """
    data = _load(path)
    own = data["databases"].get(database)
    if isinstance(own, str) and works(own):
        return own
    legacy = data.get("password")
    if isinstance(legacy, str) and works(legacy):
        data["databases"][database] = legacy
        del data["password"]
        _save(path, data)
        return legacy
    return None

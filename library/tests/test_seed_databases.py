"""`make run` and `make cluster` seed two databases under one ``var/``.

Each seed made a password and wrote it to ``var/demo-credentials.json``, so seeding
the cluster's database replaced the password `make run` printed, and `make run`
then printed one its database did not know. Here two real databases are seeded by
real ``manage.py seed_library`` runs, one after the other, in a ``var/`` of the
test's own; seeding the first again must print the first's own, working password.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from django.contrib.auth.hashers import check_password

from config.processes import ROOT, child_environment, manage_command

pytestmark = pytest.mark.processes

LOGIN = re.compile(r"staff login: staff / (\S+)")


def run(var: Path, database: Path, *args: str) -> str:
    env = {
        **child_environment(),
        "LIBRARY_VAR_DIR": str(var),
        "DATABASE_URL": f"sqlite:///{database}",
    }
    done = subprocess.run(
        manage_command(*args),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def printed_password(output: str) -> str:
    found = LOGIN.search(output)
    assert found is not None, output
    return found.group(1)


def works_in(database: Path, password: str) -> bool:
    with sqlite3.connect(database) as db:
        (encoded,) = db.execute(
            "SELECT password FROM auth_user WHERE username = 'staff'"
        ).fetchone()
    return check_password(password, encoded)


def test_seeding_a_second_database_keeps_the_first_ones_password(tmp_path):
    run_db, cluster_db = tmp_path / "library.sqlite3", tmp_path / "cluster.sqlite3"
    run(tmp_path, run_db, "migrate", "--noinput", "-v", "0")
    shutil.copy(run_db, cluster_db)  # migrated, not seeded: as a new cluster database

    first = printed_password(run(tmp_path, run_db, "seed_library"))  # make run
    second = printed_password(run(tmp_path, cluster_db, "seed_library"))  # cluster
    again = printed_password(run(tmp_path, run_db, "seed_library"))  # make run again

    assert first != second
    assert again == first
    assert works_in(run_db, again)
    assert works_in(cluster_db, second)
    assert not works_in(run_db, second)

"""Create the cluster's PostgreSQL database unless it exists: ``cluster_db.py URL``.

``make cluster`` runs it before ``migrate``; Django's commands need the database to
exist, and PostgreSQL has no ``CREATE DATABASE IF NOT EXISTS``.
"""

from __future__ import annotations

import sys
from urllib.parse import urlparse

import psycopg
from psycopg import sql


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: cluster_db.py postgres://USER@HOST:PORT/NAME", file=sys.stderr)
        return 2
    url = urlparse(argv[0])
    name = url.path.lstrip("/")
    # The maintenance database "postgres" always exists; connect there to create.
    admin = url._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as connection:
        found = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if found is None:
            connection.execute(
                sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            )
            print(f"Created database {name}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

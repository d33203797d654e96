"""Reads on a kept connection: a connection the server dropped is dialled again."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import ProgrammingError, connection, connections

from config.connections import read_on_kept_connection
from config.processes import wait_until

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not ON_POSTGRES, reason="a server to drop the connection")
def test_a_read_on_a_connection_the_server_dropped_is_tried_on_a_new_one() -> None:
    first = read_on_kept_connection(backend_pid)
    assert read_on_kept_connection(backend_pid) == first  # kept between reads
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [first])

        def gone() -> bool:
            with other.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [first])
                return cursor.fetchone() is None

        wait_until(gone, "the backend to end")
    finally:
        other.close()
    second = read_on_kept_connection(backend_pid)  # one failure, then a new one
    assert second != first


@pytest.mark.django_db(transaction=True)
def test_a_read_that_fails_otherwise_is_not_tried_again() -> None:
    calls = []

    def bad_read() -> None:
        calls.append(1)
        # What the database answers a wrong query with (SQLite calls a missing
        # table an OperationalError, so the error is raised here directly).
        raise ProgrammingError("column no_such_column does not exist")

    read_on_kept_connection(lambda: connection.ensure_connection())
    with pytest.raises(ProgrammingError):
        read_on_kept_connection(bad_read)
    assert calls == [1]
    assert connection.connection is None  # closed: the next read starts clean

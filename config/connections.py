"""Reads on a database connection a long-lived thread keeps from call to call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import Error, InterfaceError, OperationalError, connection

T = TypeVar("T")


def read_on_kept_connection(read: Callable[[], T]) -> T:
    """Run ``read`` on this thread's connection, which stays open after it.

    A kept connection that the server dropped meanwhile (a restart, an idle
    timeout) fails on its first use: the read is tried once more, on a new
    connection. Any other failure closes the connection and raises. Reads only: a
    write tried twice could apply twice.
    """
    reused = connection.connection is not None
    try:
        return read()
    except (OperationalError, InterfaceError):
        connection.close()
        if not reused:
            raise
    except Error:
        connection.close()
        raise
    try:
        return read()
    except Error:
        connection.close()
        raise

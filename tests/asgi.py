"""The ASGI scope of one HTTP request, for tests that call the application itself."""

from __future__ import annotations

from typing import Any


def http_scope(
    path: str,
    query: str = "",
    *,
    method: str = "GET",
    host: str = "127.0.0.1",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, Any]:
    """Return the scope daphne would pass for ``method path?query`` on plain HTTP."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", host.encode()), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }

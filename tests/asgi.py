"""What tests that call the ASGI application itself share: an HTTP scope, a socket."""

from __future__ import annotations

from typing import Any

from channels.testing import WebsocketCommunicator

from config.processes import WAIT_S


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


async def http_exchange(
    application: Any, scope: dict[str, Any]
) -> tuple[dict[str, Any], bytes]:
    """Send one bodiless request; return the response's start message and body."""
    from asgiref.testing import ApplicationCommunicator

    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(WAIT_S)
    body = b""
    while True:
        message = await communicator.receive_output(WAIT_S)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(WAIT_S)  # the handler's own cleanup, not cut short
    return start, body


class Socket(WebsocketCommunicator):  # type: ignore[misc]  # channels has no types
    """Channels' test WebSocket with this suite's deadline instead of its 1 s.

    A frame that takes more than a second on a loaded machine is slow, not wrong;
    a wait still ends the moment the frame arrives. Only ``receive_nothing`` keeps
    its short window: it proves an absence.

    Like a browser it sends a Host header (``127.0.0.1``) unless given one: the
    origin check compares the page's origin with the host the socket was opened to.
    """

    def __init__(
        self, application: Any, path: str, headers: list[Any] | None = None, **kw: Any
    ) -> None:
        headers = list(headers or [])
        if not any(name.lower() == b"host" for name, _ in headers):
            headers.insert(0, (b"host", b"127.0.0.1"))
        super().__init__(application, path, headers=headers, **kw)

    async def connect(self, timeout: float = WAIT_S) -> Any:
        return await super().connect(timeout)

    async def receive_from(self, timeout: float = WAIT_S) -> Any:
        return await super().receive_from(timeout)

    async def receive_json_from(self, timeout: float = WAIT_S) -> Any:
        return await super().receive_json_from(timeout)

    async def disconnect(self, code: int = 1000, timeout: float = WAIT_S) -> None:
        await super().disconnect(code, timeout)

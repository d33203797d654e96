"""Lab for "WebSocket Server": the upgrade, frames, ping and close, on the wire.

Model part: the lesson's ``ws-server.mjs`` ported to a small threaded TCP server in
this process (a plain request gets 426; an upgrade gets 101 with the accept key; a
text frame gets the ``ack``; ping gets pong with the same body; close is echoed),
driven by our raw client (``course.instruments.websocket_client``) sending the
lesson's three frames.
Nothing here depends on the machine, so the tables equal what the course prints:
the client's frames are masked (38, 8 and 10 bytes), the server's are not.

Live part: the same client against our daphne's live stock socket
(``/ws/branches/<id>/stock/``, the first branch of the database): the plain GET's
426, the handshake, the snapshot the server pushes, a ``snapshot`` request, ping,
and the closing handshake. Daphne answers a close with code 1000 and no reason.
"""

from __future__ import annotations

from course.labs.harness.base import Lab
from course.labs.websocket_server import live, model
from course.labs.websocket_server.params import PARAMS, WebsocketServerParams

__all__ = ["LAB"]


LAB = Lab(
    slug="websocket-server",
    title="WebSocket Server",
    params=PARAMS,
    params_type=WebsocketServerParams,
    model=model.model,
    live=live.LIVE,
    notes=(
        "Frames are logged by our raw-socket client: the client masks every frame, "
        "the server never does. The live part talks to the live stock socket."
    ),
)

"""WebSocket consumers.

LiveStockConsumer serves /ws/branches/<id>/stock/: a snapshot with a version on
connect, then the branch's updates as the broadcast subscription sends them. On the
Redis layer they come through the process's fan-out (``realtime.fanout``: one
subscription per group and process, the frame written to each socket by
``deliver``); on channels' in-process layer as group messages (``stock_update``).
Either may drop a message, so every update carries the branch's stock version; a
client that sees a gap asks for a new snapshot.

Each forwarded update is counted per group (``realtime.accounting``), and the
consumer leaves its group on every way out, so membership does not leak.

Every socket counts toward the branch's viewers (``realtime.presence``), who are
sessions (or, for a socket without one, client addresses): the snapshot carries
``watching``, the count including this socket's viewer. A client that names its tab
(``?tab=<random id>``, as the live page does) is sent ``presence`` frames when the
count changes; other clients (labs, benchmarks) hear only stock frames.

One client may hold only its share of a process's sockets (``realtime.limits``:
``REALTIME_SOCKETS_PER_CLIENT`` per address, ``REALTIME_SOCKETS_PER_SESSION`` per
session); a socket past it is accepted and closed at once with 4429, so the page
learns why and waits before trying again.

Without Redis the socket stays open (``realtime.feed``): the page is told live
updates are paused (a ``paused`` frame), snapshots still come from the database, and
when Redis answers again the consumer rejoins its group and sends ``resumed`` and a
fresh snapshot. A handshake during the outage is accepted the same way, paused.

The scope's user is read once, at connect, but a socket lives for hours: a
correction is allowed only if the session, read again from its store, still
belongs to an active user who holds ``library.correct_stock`` now.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import close_old_connections
from django.http import HttpRequest

from library.errors import LibraryError
from library.models import Book, Branch
from library.permissions import CORRECT_STOCK, user_may
from library.selectors.stock import branch_stock_state
from library.services import stock_correct
from realtime.accounting import deliveries_add, delivery_record
from realtime.broadcast import update_frame
from realtime.fanout import fanout_for, fanout_supported
from realtime.feed import LAYER_ERRORS, RESUME_SPREAD_S, LiveFeed, layer_watch
from realtime.limits import CLOSE_TOO_MANY, SOCKET_PLACES, Holder, Place
from realtime.presence import (
    TAB_RULE,
    PresenceEvent,
    PresenceFrame,
    Viewer,
    presence_member,
    presence_viewer,
    tab_valid,
)

log = logging.getLogger("realtime")

MAX_FRAME_BYTES = 4096
MAX_SHELF_COUNT = 10_000
# 1009 is the protocol's "message too big", but daphne (autobahn) lets an application
# send only 1000 or 3000-4999 and turns anything else into 1011; 4009 says the same
# in the application's range.
CLOSE_TOO_BIG = 4009
CLOSE_NOT_FOUND = 4404


def _snapshot(branch_id: int) -> dict[str, Any]:
    close_old_connections()  # a long-lived consumer must not reuse a dead connection
    state = branch_stock_state(branch_id)
    titles = dict(Book.objects.filter(branch_id=branch_id).values_list("id", "title"))
    books = [
        {"id": int(pk), "title": titles[int(pk)], "on_shelf": n}
        for pk, n in state["books"].items()
    ]
    return {
        "type": "snapshot",
        "branch": branch_id,
        "version": state["version"],
        "total": state["total"],
        "books": books,
    }


def _correct(branch_id: int, book_id: int, on_shelf: int) -> int:
    close_old_connections()
    if not Book.objects.filter(pk=book_id, branch_id=branch_id).exists():
        raise LibraryError(f"Book #{book_id} is not in this branch.", status=404)
    return stock_correct(book_id=book_id, on_shelf=on_shelf).on_shelf


def _corrector(session_key: str | None) -> AbstractBaseUser | None:
    """Return the session's user if they may correct stock now, else None.

    The session comes fresh from its store and the user from the database, the way
    an HTTP request would see them: after a logout the session is gone, after a
    password change its hash no longer matches, a deactivated user or a revoked
    permission fails ``user_may``.
    """
    close_old_connections()
    if not session_key:
        return None
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(request)
    if isinstance(user, AbstractBaseUser) and user_may(user, CORRECT_STOCK):
        return user
    return None


def _branch_exists(branch_id: int) -> bool:
    close_old_connections()
    return Branch.objects.filter(pk=branch_id).exists()


def _holder(scope: dict[str, Any]) -> Holder:
    """Return who opened the socket: its client address and its valid session."""
    client = scope.get("client")
    # The authentication middleware has loaded the session by now: a key that names
    # no stored session reads as None, so a made-up cookie is no session at all.
    session = scope.get("session")
    return Holder.of(
        str(client[0]) if client else None, getattr(session, "session_key", None)
    )


def _tab(query_string: bytes) -> tuple[str | None, bool]:
    """Return the ``tab`` the client named (None if none or invalid), and validity."""
    values = parse_qs(query_string.decode("latin-1")).get("tab")
    if values is None:
        return None, True
    if len(values) == 1 and tab_valid(values[0]):
        return values[0], True
    return None, False


class LiveStockConsumer(AsyncWebsocketConsumer):
    branch_id: int
    group: str
    viewer: Viewer
    named_tab: bool
    feed: LiveFeed
    place: Place | None = None
    # Broadcast frames that arrived before the first snapshot went out.
    _held: list[str] | None = None
    _resyncing: asyncio.Task[None] | None = None

    # channels' __call__ sets ``channel_receive`` (the layer's receive of this
    # consumer's channel) and reads it back at once to start its dispatch loop; the
    # setter wraps it, so the loop reads through the feed, which pauses instead of
    # raising (and ending the consumer with 1011) when Redis is away.
    @property
    def channel_receive(self) -> LiveFeed:
        return self.feed

    @channel_receive.setter
    def channel_receive(self, receive: Any) -> None:
        self.feed = LiveFeed(
            receive, self._join_group, lambda: layer_watch(self.channel_layer)
        )

    async def _join_group(self) -> None:
        await self.channel_layer.group_add(self.group, self.channel_name)
        if fanout_supported(self.channel_layer):
            fanout, channel = fanout_for(self.channel_layer, self.group)
            await fanout.join(channel, self.group, self)

    async def deliver(self, frame: str) -> bool:
        """Write a broadcast's frame (``realtime.fanout``); hold it until the
        snapshot is out, so a page never gets an update before its snapshot."""
        if self._held is not None:
            self._held.append(frame)
            return False
        await self.send(text_data=frame)
        return True

    def resync(self) -> None:
        """The fan-out lost its subscription for a while: send a fresh snapshot.

        A paused feed sends one when it resumes; otherwise the snapshot follows a
        random delay, so a process's pages do not reach the database at once.
        """
        if self.feed.paused or self._held is not None:
            return
        self._resyncing = asyncio.create_task(self._resync_later())

    async def _resync_later(self) -> None:
        await asyncio.sleep(random.uniform(0, RESUME_SPREAD_S))
        with contextlib.suppress(*LAYER_ERRORS):
            await self._send_snapshot()

    async def connect(self) -> None:
        self.branch_id = int(self.scope["url_route"]["kwargs"]["branch_id"])
        self.group = f"branch-{self.branch_id}"
        holder = _holder(self.scope)
        self.place = SOCKET_PLACES.take(holder)
        if self.place is None:
            # Accepted to be closed: a refused handshake would reach the page as a
            # bare failure (1006), with no reason to wait before the next attempt.
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY)
            return
        if not await database_sync_to_async(_branch_exists)(self.branch_id):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        tab, tab_ok = _tab(self.scope.get("query_string", b""))
        self.named_tab = tab is not None or not tab_ok
        self.viewer = Viewer(
            branch_id=self.branch_id,
            member=presence_member(
                presence_viewer(holder.session, holder.address), self.channel_name
            ),
            layer=self.channel_layer,
            tell=self._tell_presence,
        )
        # Subscribed before the snapshot is read, so no update falls between them.
        # Without Redis the page opens paused; the feed joins once Redis is back.
        self._held = []
        try:
            await self._join_group()
        except LAYER_ERRORS as error:
            self.feed.pause(error)
        else:
            self.feed.joined()
        try:
            await self.accept()
            await self.viewer.join()
            await self._send_snapshot()
            await self._release_held()
            if self.feed.paused:
                await self._tell_paused()
            if not tab_ok:
                await self._error(TAB_RULE)
            self.viewer.start_beating()
        except BaseException:
            # A consumer whose connect raises never gets disconnect(): leave the
            # group and the viewers here, or its channel name stays in the group
            # for a day (group_expiry) and in the count for a TTL.
            await self._leave_group()
            await self.viewer.leave()
            self.place.release()
            raise

    async def disconnect(self, code: int) -> None:
        # Every way out passes here (close by either side, a lost socket), so the
        # group never keeps a channel nobody reads (realtime.accounting.group_size).
        if self.place is not None:
            self.place.release()
        if hasattr(self, "group"):
            await self._leave_group()
        if hasattr(self, "viewer"):
            await self.viewer.leave()

    async def _release_held(self) -> None:
        held, self._held = self._held or [], None
        for frame in held:
            await self.send(text_data=frame)
        if held:
            deliveries_add({self.group: len(held)})

    async def _leave_group(self) -> None:
        # Redis away: the entry stays until group_expiry, and a message sent to it
        # meanwhile expires unread (the layer's expiry); nothing else to undo.
        if fanout_supported(self.channel_layer):
            fanout, channel = fanout_for(self.channel_layer, self.group)
            await fanout.leave(channel, self)
        if self._resyncing is not None:
            self._resyncing.cancel()
        with contextlib.suppress(*LAYER_ERRORS):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def live_paused(self, event: dict[str, Any]) -> None:
        """Tell the page its live updates stopped (``realtime.feed``: Redis away)."""
        await self._tell_paused()

    async def live_resumed(self, event: dict[str, Any]) -> None:
        """Back in the group after an outage: count in again, send the truth."""
        await self.viewer.join()
        await self._send({"type": "resumed"})
        await self._send_snapshot()

    async def _tell_paused(self) -> None:
        await self._send(
            {
                "type": "paused",
                "reason": "live updates are paused; the counts shown may be stale",
            }
        )

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None
    ) -> None:
        size = (
            len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        )
        if size > MAX_FRAME_BYTES:
            await self.close(code=CLOSE_TOO_BIG)
            return
        if text_data is None:
            await self._error("binary frames are not understood; send JSON text")
            return
        try:
            request = json.loads(text_data)
        except ValueError:
            await self._error("invalid JSON")
            return
        except RecursionError:
            # A few kilobytes of "[" nest deeper than the interpreter's recursion
            # limit; the decoder then raises this instead of ValueError, and left
            # uncaught it would end the consumer (close 1011) over one bad frame.
            await self._error("JSON nested too deeply")
            return
        if not isinstance(request, dict):
            await self._error("a request is a JSON object with an action")
            return
        action = request.get("action")
        if action == "snapshot":
            await self._send_snapshot()
        elif action == "correct":
            await self._handle_correct(request)
        else:
            await self._error(f"unknown action {str(action)[:40]!r}")

    async def _handle_correct(self, request: dict[str, Any]) -> None:
        session = self.scope.get("session")
        user = await database_sync_to_async(_corrector)(
            session.session_key if session is not None else None
        )
        if user is None:
            await self._error(
                "correcting a shelf count needs a signed-in user with the right",
                code="forbidden",
            )
            return
        book_id, on_shelf = request.get("book"), request.get("on_shelf")
        valid = (
            isinstance(book_id, int)
            and isinstance(on_shelf, int)
            and not isinstance(on_shelf, bool)
            and 0 <= on_shelf <= MAX_SHELF_COUNT
        )
        if not valid:
            await self._error(
                f"book and on_shelf must be integers, 0 ≤ on_shelf ≤ {MAX_SHELF_COUNT}"
            )
            return
        try:
            count = await database_sync_to_async(_correct)(
                self.branch_id, book_id, on_shelf
            )
        except LibraryError as error:
            await self._error(error.message, code=error.code)
            return
        log.info("shelf count of book %s set to %s by %s", book_id, count, user)
        await self._send({"type": "corrected", "book": book_id, "on_shelf": count})

    async def stock_update(self, event: dict[str, Any]) -> None:
        """Forward a group message ``stock.update``: the broadcasts of channels'
        in-process layer (on the Redis layer they come through ``deliver``)."""
        await self.send(text_data=update_frame(event))
        await delivery_record(self.group)

    async def _send_snapshot(self) -> None:
        snapshot = await database_sync_to_async(_snapshot)(self.branch_id)
        # The count this socket knows, so a late joiner (or a resync) has it at once.
        await self._send({**snapshot, "watching": self.viewer.watching})

    async def presence_update(self, event: PresenceEvent) -> None:
        """Take a presence broadcast (group message presence.update)."""
        if self.viewer.apply(event):
            await self._tell_presence(self.viewer.watching)

    async def _tell_presence(self, watching: int | None) -> None:
        if self.named_tab:
            frame: PresenceFrame = {"type": "presence", "watching": watching}
            await self._send(dict(frame))

    async def _error(self, message: str, *, code: str = "bad_request") -> None:
        await self._send({"type": "error", "code": code, "error": message})

    async def _send(self, payload: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(payload, separators=(",", ":")))

"""Broadcast accounting: no group leak, broadcasts and deliveries counted per group.

Membership is read where channels_redis keeps it (the sorted set
``<prefix>:group:<name>``), so a consumer that forgot ``group_discard`` would show
here as a growing set.
"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.test import override_settings

from config.processes import await_until, free_port, start_daphne, stop, wait_until
from course.instruments.websocket_client import RawWebSocket
from library.services import loan_issue
from messaging.services import messaging_drain
from realtime.accounting import (
    BROADCASTS_KEY,
    counters_read,
    group_key,
    group_size,
    redis_client,
)
from realtime.broadcast import broadcasts_send
from realtime.tests.stock_sockets import GROUP, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_a_thousand_connect_disconnect_cycles_leave_no_member(stock_branch):
    assert await sync_to_async(group_size)(GROUP) == 0
    for _ in range(1000):
        ws = await open_socket()
        await ws.disconnect()
    assert await sync_to_async(group_size)(GROUP) == 0
    # The layer keeps the group as a sorted set under its prefix; it is gone.
    assert await sync_to_async(redis_client().exists)(group_key(GROUP)) == 0


async def test_members_are_counted_while_connected(stock_branch):
    sockets = [await open_socket() for _ in range(3)]
    assert await sync_to_async(group_size)(GROUP) == 3
    await sockets[0].disconnect()
    assert await sync_to_async(group_size)(GROUP) == 2
    for ws in sockets[1:]:
        await ws.disconnect()
    assert await sync_to_async(group_size)(GROUP) == 0


async def test_one_broadcast_to_three_sockets_counts_one_sent_three_delivered(
    stock_branch,
):
    sockets = [await open_socket() for _ in range(3)]
    event = {"type": "stock.update", "branch": 1, "version": 9, "total": 5}
    await sync_to_async(broadcasts_send)(get_channel_layer(), [(GROUP, event)])
    for ws in sockets:
        assert (await ws.receive_json_from(timeout=5))["version"] == 9
    # The delivery is counted just after the frame is written.
    await await_until(
        lambda: counters_read([GROUP])[GROUP]["deliveries"] >= 3, "3 deliveries"
    )
    counts = await sync_to_async(counters_read)([GROUP])
    assert counts == {GROUP: {"broadcasts": 1, "deliveries": 3}}
    for ws in sockets:
        await ws.disconnect()


async def test_a_broadcast_to_an_empty_group_is_sent_and_never_delivered(stock_branch):
    event = {"type": "stock.update", "branch": 1, "version": 1, "total": 5}
    await sync_to_async(broadcasts_send)(get_channel_layer(), [(GROUP, event)] * 2)
    counts = await sync_to_async(counters_read)()
    assert counts == {GROUP: {"broadcasts": 2, "deliveries": 0}}


async def test_a_loan_through_the_outbox_counts_one_broadcast_per_branch(stock_branch):
    ws = await open_socket()
    await sync_to_async(loan_issue)(book_id=1, member_id=1)
    await sync_to_async(messaging_drain)(owner="test")
    update = await ws.receive_json_from(timeout=5)
    assert (update["type"], update["on_shelf"]) == ("update", 4)
    # The consumer counts the delivery just after writing the frame.
    await await_until(
        lambda: counters_read([GROUP])[GROUP]["deliveries"] >= 1, "the delivery"
    )
    counts = await sync_to_async(counters_read)([GROUP])
    assert counts == {GROUP: {"broadcasts": 1, "deliveries": 1}}
    await ws.disconnect()


def test_counters_survive_a_redis_error_without_breaking_the_send(stock_branch, caplog):
    """A counter that cannot be written is logged; the message still goes out."""
    from realtime import accounting

    class Broken:
        def pipeline(self, **kwargs):
            import redis

            raise redis.ConnectionError("down")

    sent = []

    class Layer:
        async def group_send(self, group, event):
            sent.append(group)

    original = accounting.redis_client
    accounting.redis_client = lambda: Broken()  # type: ignore[assignment,return-value]
    try:
        broadcasts_send(Layer(), [(GROUP, {"type": "x"})])
    finally:
        accounting.redis_client = original
    assert sent == [GROUP]
    assert "broadcast counters not updated" in caplog.text


@override_settings(
    CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
)
async def test_the_in_process_layer_also_releases_members(stock_branch):
    from channels.layers import channel_layers

    channel_layers.backends.pop("default", None)  # built again from the override
    try:
        layer = get_channel_layer()
        for _ in range(50):
            ws = await open_socket()
            assert group_size(GROUP, layer) == 1
            await ws.disconnect()
        assert group_size(GROUP, layer) == 0
    finally:
        channel_layers.backends.pop("default", None)


@pytest.mark.processes
def test_real_server_releases_members_of_closed_and_dropped_sockets(stock_branch):
    port = free_port()
    process = start_daphne(port)
    try:
        origin = {"Origin": f"http://127.0.0.1:{port}"}
        for cycle in range(60):
            ws = RawWebSocket.connect(
                "127.0.0.1", port, "/ws/branches/1/stock/", headers=origin
            )
            ws.receive()
            if cycle % 2:
                ws.close()
            else:
                ws.abort()  # vanishes without a closing handshake
        # The server releases them as it notices each close or drop.
        wait_until(lambda: group_size(GROUP) == 0, "every member released")
    finally:
        stop(process)


def test_broadcast_hash_is_one_field_per_group(stock_branch, redis_client):
    layer = get_channel_layer()
    broadcasts_send(
        layer,
        [
            ("branch-1", {"type": "x"}),
            ("branch-2", {"type": "x"}),
            ("branch-1", {"type": "x"}),
        ],
    )
    assert redis_client.hgetall(BROADCASTS_KEY) == {
        b"branch-1": b"2",
        b"branch-2": b"1",
    }

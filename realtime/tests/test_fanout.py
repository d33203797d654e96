"""The broadcast fan-out: one Redis subscription per process and group, one frame
for all of the process's sockets, and a lost subscription restored with a resync.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from config.processes import await_until
from realtime.accounting import counters_read, redis_client
from realtime.broadcast import broadcasts_send
from realtime.fanout import fanout_channel, subscriber_name
from realtime.tests.stock_sockets import GROUP, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


def subscribers(channel: str) -> int:
    return int(dict(redis_client().pubsub_numsub(channel))[channel.encode()])


async def test_sockets_of_one_process_share_one_subscription(stock_branch):
    channel = fanout_channel(get_channel_layer(), GROUP)
    sockets = [await open_socket() for _ in range(3)]
    assert await sync_to_async(subscribers)(channel) == 1
    event = {"type": "stock.update", "branch": 1, "version": 1, "total": 4}
    await sync_to_async(broadcasts_send)(get_channel_layer(), [(GROUP, event)])
    frames = [await ws.receive_json_from() for ws in sockets]
    assert frames == [{**event, "type": "update"}] * 3
    # Counted once for the three frames, in the background.
    await await_until(
        lambda: counters_read([GROUP])[GROUP] == {"broadcasts": 1, "deliveries": 3},
        "the three deliveries counted",
    )
    for ws in sockets:
        await ws.disconnect()
    await await_until(lambda: subscribers(channel) == 0, "the subscription dropped")


async def test_a_lost_subscription_comes_back_and_its_sockets_resync(stock_branch):
    ws = await open_socket()
    killed = await sync_to_async(_kill_subscriber)()
    assert killed == 1
    # Frames published while it was away are lost to it: the page gets the state.
    snapshot = await ws.receive_json_from()
    assert (snapshot["type"], snapshot["version"]) == ("snapshot", 0)
    event = {"type": "stock.update", "branch": 1, "version": 1, "total": 4}
    await sync_to_async(broadcasts_send)(get_channel_layer(), [(GROUP, event)])
    assert await ws.receive_json_from() == {**event, "type": "update"}
    await ws.disconnect()


def _kill_subscriber() -> int:
    """Close this process's fan-out connection from the Redis side."""
    client = redis_client()
    ours = [c for c in client.client_list() if c.get("name") == subscriber_name()]
    for entry in ours:
        client.client_kill_filter(_id=entry["id"])
    return len(ours)


def test_batches_sent_from_sync_code_share_one_loop_and_connection(monkeypatch):
    from realtime import fanout

    pools = []
    create_pool = fanout.create_pool  # type: ignore[attr-defined]

    def counted_pool(host):
        pools.append(host)
        return create_pool(host)

    monkeypatch.setattr(fanout, "_publisher_now", None)  # this test's own loop
    monkeypatch.setattr(fanout, "create_pool", counted_pool)
    layer = get_channel_layer()
    channel = fanout_channel(layer, GROUP)
    listener = redis_client().pubsub()
    listener.subscribe(channel)
    try:
        for version in (1, 2, 3):
            event = {"type": "stock.update", "branch": 1, "version": version}
            broadcasts_send(layer, [(GROUP, event)])
        heard: list[bytes] = []
        while len(heard) < 3:
            message = listener.get_message(timeout=10)
            assert message is not None, heard
            if message["type"] == "message":
                heard.append(message["data"])
    finally:
        listener.close()
    versions = [json.loads(frame)["version"] for frame in heard]
    assert versions == [1, 2, 3]
    assert len(pools) == 1  # one client for the host, kept from batch to batch
    publishing = fanout._publisher()
    assert publishing.loop.is_running()
    publishing.loop.call_soon_threadsafe(publishing.loop.stop)

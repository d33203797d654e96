"""The pure parts of presence: the broadcast throttle, beat spacing, ids, ordering."""

from __future__ import annotations

import random

import pytest

from realtime.presence import (
    PresenceEvent,
    Viewer,
    broadcast_delay_ms,
    heartbeat_interval_s,
    presence_member,
    presence_viewer,
    tab_valid,
)


def test_a_branch_never_broadcast_is_told_at_once():
    assert broadcast_delay_ms(now_ms=5_000, last_sent_ms=None, interval_ms=1000) == 0


def test_a_broadcast_within_the_interval_delays_the_next_to_its_end():
    assert broadcast_delay_ms(now_ms=5_300, last_sent_ms=5_000, interval_ms=1000) == 700
    assert broadcast_delay_ms(now_ms=5_999, last_sent_ms=5_000, interval_ms=1000) == 1


def test_a_broadcast_an_interval_ago_or_more_allows_one_now():
    assert broadcast_delay_ms(now_ms=6_000, last_sent_ms=5_000, interval_ms=1000) == 0
    assert broadcast_delay_ms(now_ms=9_000, last_sent_ms=5_000, interval_ms=1000) == 0


def test_a_clock_that_went_back_waits_one_interval_at_most():
    assert (
        broadcast_delay_ms(now_ms=1_000, last_sent_ms=50_000, interval_ms=1000) == 1000
    )


def test_a_thousand_changes_in_one_second_allow_one_broadcast_without_waiting():
    # Replays the decisions of a burst: a change every millisecond, each one sent
    # when the policy says "now", and the claim time recorded as the last send.
    last: int | None = None
    sent = 0
    for now in range(10_000, 11_000):
        if broadcast_delay_ms(now_ms=now, last_sent_ms=last, interval_ms=1000) == 0:
            sent, last = sent + 1, now
    assert sent == 1


def test_beats_fall_between_four_fifths_and_all_of_a_third_of_the_ttl():
    rng = random.Random(7)
    waits = [heartbeat_interval_s(30, rng) for _ in range(2000)]
    assert min(waits) >= 8.0
    assert max(waits) <= 10.0
    assert max(waits) - min(waits) > 1.5  # spread out, not in step


@pytest.mark.parametrize("tab", ["abcdefgh", "A1_b-" * 12 + "abcd", "0" * 64])
def test_tabs_that_are_accepted(tab):
    assert tab_valid(tab)


@pytest.mark.parametrize(
    "tab",
    ["", "short", "0" * 65, "has space1", "semi;colon", "über-tab1", "a\nbcdefgh"],
)
def test_tabs_that_are_refused(tab):
    assert not tab_valid(tab)


def test_a_socket_is_counted_as_its_session_else_its_address():
    assert presence_viewer("0a1b", "192.0.2.1") == "session:0a1b"
    assert presence_viewer(None, "192.0.2.1") == "addr:192.0.2.1"
    assert (
        presence_member("session:0a1b", "specific.x!y") == "session:0a1b|specific.x!y"
    )
    # The viewer is what precedes the last '|', so a socket name cannot move it.
    assert presence_member("addr:::1", "a|b") == "addr:::1|a_b"


async def _silent(watching: int | None) -> None:
    return None


def test_a_viewer_ignores_a_broadcast_older_than_what_it_knows():
    viewer = Viewer(branch_id=1, member="tab:abcdefgh", layer=None, tell=_silent)
    viewer.watching, viewer.as_of_ms = 4, 2_000

    def event(at: int) -> PresenceEvent:
        return {"type": "presence.update", "branch": 1, "watching": 9, "at": at}

    assert viewer.apply(event(1_500)) is False
    assert viewer.watching == 4
    assert viewer.apply(event(2_500)) is True
    assert (viewer.watching, viewer.as_of_ms) == (9, 2_500)
    # Same number again: nothing new to tell the socket.
    assert viewer.apply(event(3_000)) is False

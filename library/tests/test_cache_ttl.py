"""Lifetime jitter, shard routing and hot-key copies: pure functions, no Redis."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from library.cache.ttl import (
    MAX_LIFETIME_S,
    hot_copy_key,
    key_digest,
    lifetime_capped,
    lifetime_with_jitter,
    shard_of,
)

BOOK_KEYS = [f"library:s1:g1:tbranch-1:book:{i}" for i in range(1, 201)]
HOT = "library:s1:g1:tbranch-1:stock"


def test_digest_is_first_32_bits_of_sha256():
    key = "library:s1:g1:tbranch-1:book:7"
    expected = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
    assert key_digest(key) == expected
    assert 0 <= key_digest("") < 2**32


def test_jittered_lifetime_is_deterministic_and_in_range():
    for key in BOOK_KEYS:
        lifetime = lifetime_with_jitter(key, 100, 40)
        assert lifetime == lifetime_with_jitter(key, 100, 40)
        assert 100 <= lifetime < 140
        assert lifetime == 100 + key_digest(key) % 40


def test_zero_jitter_keeps_the_lifetime():
    assert {lifetime_with_jitter(key, 100, 0) for key in BOOK_KEYS} == {100}


def test_jitter_spreads_200_simultaneous_expiries_like_the_course():
    fixed = Counter(lifetime_with_jitter(key, 100, 0) for key in BOOK_KEYS)
    jittered = Counter(lifetime_with_jitter(key, 100, 40) for key in BOOK_KEYS)
    assert (len(fixed), max(fixed.values())) == (1, 200)
    assert (len(jittered), max(jittered.values())) == (40, 9)


def test_every_lifetime_is_capped():
    assert lifetime_with_jitter("k", 10 * MAX_LIFETIME_S, 500) == MAX_LIFETIME_S
    assert lifetime_capped(MAX_LIFETIME_S + 1) == MAX_LIFETIME_S
    assert lifetime_capped(0.25) == 0.25


@pytest.mark.parametrize(
    ("lifetime", "jitter"), [(0, 10), (-5, 0), (10, -1)], ids=["zero", "neg", "jit"]
)
def test_bad_lifetimes_are_refused(lifetime, jitter):
    with pytest.raises(ValueError, match=r"lifetime|jitter"):
        lifetime_with_jitter("k", lifetime, jitter)


def _shard_loads(copies: int) -> list[int]:
    # The course's request mix: six in ten requests on one hot key, four shards.
    loads = [0, 0, 0, 0]
    for i in range(1000):
        branch, book = 2 + i % 3, i % 40
        cold = ":".join(("library", "s1", "g1", f"tbranch-{branch}", "book", str(book)))
        key = HOT if i % 10 < 6 else cold
        if key == HOT and copies > 1:
            key = hot_copy_key(key, copies, i)
        loads[shard_of(key, 4)] += 1
    return loads


def test_splitting_a_hot_key_lowers_the_busiest_shard():
    assert _shard_loads(1) == [102, 684, 108, 106]
    assert _shard_loads(4) == [102, 234, 408, 256]
    assert _shard_loads(8) == [102, 309, 333, 256]


def test_copy_and_shard_helpers():
    assert [hot_copy_key("k", 3, i) for i in range(5)] == [
        "k.0",
        "k.1",
        "k.2",
        "k.0",
        "k.1",
    ]
    assert hot_copy_key("k", 1, 99) == "k.0"
    assert {shard_of(key, 1) for key in BOOK_KEYS} == {0}
    assert {shard_of(key, 4) for key in BOOK_KEYS} == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="shard"):
        shard_of("k", 0)
    with pytest.raises(ValueError, match="copy"):
        hot_copy_key("k", 0, 1)

import pytest
from hypothesis import given
from hypothesis import strategies as st

from messaging.policies import Backoff


def test_backoff_doubles_then_caps():
    backoff = Backoff(base_ms=500, cap_ms=30_000)
    assert [backoff.delay_ms(n) for n in range(1, 9)] == [
        500,
        1000,
        2000,
        4000,
        8000,
        16000,
        30000,
        30000,
    ]


def test_attempt_zero_is_refused():
    with pytest.raises(ValueError, match="counted from 1"):
        Backoff().delay_ms(0)


def test_huge_attempt_numbers_stay_capped():
    assert Backoff(base_ms=1, cap_ms=99).delay_ms(10_000) == 99


@given(st.integers(1, 50), st.floats(0, 1, exclude_max=True))
def test_full_jitter_stays_within_zero_and_the_delay(attempt, r):
    backoff = Backoff()
    wait = backoff.full_jitter_ms(attempt, lambda: r)
    assert 0 <= wait <= backoff.delay_ms(attempt)

"""JavaScript number semantics the course's experiments depend on.

The course runs its experiments in JavaScript, where every number is an IEEE double.
Python floats are the same doubles, so porting is exact as long as the arithmetic stays
in floats and the few JS functions whose rounding differs from Python's are mirrored
here. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

LCG_MULTIPLIER = 1103515245.0
LCG_INCREMENT = 12345.0
LCG_MODULUS = 2147483648.0  # 2**31
SEED_MAX = 2147483647


class JsLcg:
    """The course's linear congruential generator, on doubles as JavaScript runs it.

    ``state * 1103515245`` can exceed 2**53, where a double no longer holds every
    integer; the product is rounded, so exact integer arithmetic would drift away from
    the course's sequence after a few steps. Keeping the state a float reproduces the
    rounding bit for bit. For non-negative operands Python's float ``%`` and
    JavaScript's ``%`` are both the exact remainder, so they agree too.
    """

    def __init__(self, seed: float) -> None:
        self.state = float(seed)

    def random(self) -> float:
        """Advance the state and return it scaled to [0, 1)."""
        self.state = (self.state * LCG_MULTIPLIER + LCG_INCREMENT) % LCG_MODULUS
        return self.state / LCG_MODULUS

    def below(self, n: int) -> int:
        """Return ``Math.floor(random() * n)``: 0 <= result < n."""
        return math.floor(self.random() * n)


def js_round(x: float) -> float:
    """Return ``Math.round(x)``: halves go up (towards +inf), unlike Python's round.

    ``x - floor(x)`` is exact for every double, so the comparison with 0.5 decides on
    the true fraction; adding 0.5 first would round 0.49999999999999994 up to 1.
    """
    if not math.isfinite(x):
        return x
    floor = math.floor(x)
    return float(floor + 1 if x - floor >= 0.5 else floor)


def js_to_fixed(x: float, digits: int = 1) -> str:
    """Return ``x.toFixed(digits)`` as JavaScript prints it.

    toFixed picks the decimal nearest to the *exact* binary value of ``x`` and, on a
    true tie, the one further from zero. ``Decimal(x)`` holds that exact value, so
    ROUND_HALF_UP on it is the same rule. Python's ``round``/``format`` round ties
    to even and would print 0.125 as "0.12" where JavaScript prints "0.13".
    """
    if not 0 <= digits <= 100:
        raise ValueError("toFixed() digits argument must be between 0 and 100")
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if abs(x) >= 1e21:
        # JavaScript prints its shortest round-trip form there; repr is the same form.
        return repr(x)
    if x == 0:
        x = 0.0  # (-0).toFixed(1) is "0.0": the sign test in the spec is x < 0
    quantum = Decimal(1).scaleb(-digits)
    return f"{Decimal(x).quantize(quantum, rounding=ROUND_HALF_UP):f}"


def js_fixed_number(x: float, digits: int = 1) -> float:
    """Return ``Number(x.toFixed(digits))``: the printed value as a number."""
    return float(js_to_fixed(x, digits))

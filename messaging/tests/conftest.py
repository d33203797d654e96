import datetime

import pytest
from django.utils import timezone

from library.models import Book, Branch, Member
from messaging.models import Delivery
from messaging.policies import Backoff


@pytest.fixture
def library_rows(db):
    """Two branches, a few books with copies and a few members."""
    central = Branch.objects.create(id=1, name="Central", city="Ankara")
    Branch.objects.create(id=2, name="Konak", city="Izmir")
    for n in range(1, 7):
        Book.objects.create(
            id=n, title=f"Book {n}", author="A", branch_id=n % 2 + 1, on_shelf=3
        )
    for n in range(1, 4):
        Member.objects.create(
            id=n,
            first_name=f"M{n}",
            last_name="S",
            registered_at=datetime.date(2024, 1, 1),
        )
    return central


# A retry wait no drain outlasts: a test that checks a failed delivery waits for its
# retry cannot let full jitter draw a wait of a few milliseconds, which the same
# drain, still busy with other copies on a loaded machine, would outlast.
LONG_BACKOFF = Backoff(base_ms=60_000, cap_ms=60_000)


class _Midpoint:
    """A random source that always draws the middle of the range."""

    def random(self) -> float:
        return 0.5


@pytest.fixture
def steady_jitter(monkeypatch):
    """Full jitter draws half the delay: with LONG_BACKOFF, a 30 s wait."""
    monkeypatch.setattr("messaging.services.process._random", _Midpoint())


def make_due(*deliveries: Delivery) -> None:
    """Expire leases and backoffs so the deliveries can be claimed now."""
    past = timezone.now() - datetime.timedelta(seconds=1)
    Delivery.objects.filter(pk__in=[d.pk for d in deliveries]).update(
        available_at=past, leased_until=None
    )

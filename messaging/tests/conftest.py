import datetime

import pytest
from django.utils import timezone

from library.models import Book, Branch, Member
from messaging.models import Delivery


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


def make_due(*deliveries: Delivery) -> None:
    """Expire leases and backoffs so the deliveries can be claimed now."""
    past = timezone.now() - datetime.timedelta(seconds=1)
    Delivery.objects.filter(pk__in=[d.pk for d in deliveries]).update(
        available_at=past, leased_until=None
    )

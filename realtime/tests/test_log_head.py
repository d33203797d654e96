"""How far the streams may read the log on PostgreSQL: past the grace, or gap-free.

A message older than the commit grace is safe to read; so is every newer one up
to the first gap in the offsets, since nothing below a gap-free run can still
commit. The ages are set on the rows, so no test waits for the grace.
"""

from __future__ import annotations

import datetime

import pytest
from django.db import connection, transaction
from django.utils import timezone

from library.services import stock_correct
from messaging.models import OutboxMessage
from realtime.polling import LOG_GRACE, log_head

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="only PostgreSQL reads behind a grace"
    ),
]


def _publish() -> int:
    stock_correct(book_id=1, on_shelf=2)
    return int(OutboxMessage.objects.order_by("-id").values_list("id", flat=True)[0])


def _age(offset: int) -> None:
    old = timezone.now() - LOG_GRACE - datetime.timedelta(seconds=1)
    OutboxMessage.objects.filter(pk=offset).update(created_at=old)


class _RolledBack(Exception):
    pass


def _publish_rolled_back() -> None:
    """Draw an offset and roll it back: a gap in the offsets forever."""
    with transaction.atomic():
        _publish()
        raise _RolledBack


def test_a_gap_free_run_is_readable_at_once_and_a_gap_waits_for_the_grace(library):
    anchor = _publish()
    _age(anchor)
    assert log_head() == anchor
    run = [_publish(), _publish()]
    assert run == [anchor + 1, anchor + 2]
    assert log_head() == run[-1]  # no gap: no grace to wait for

    with pytest.raises(_RolledBack):
        _publish_rolled_back()
    after_gap = _publish()
    assert after_gap == run[-1] + 2
    assert log_head() == run[-1]  # the gap might still be a slow commit
    _age(after_gap)
    assert log_head() == after_gap

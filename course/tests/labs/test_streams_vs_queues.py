"""The streams-vs-queues lab: its model against the course and an independent
reference, its live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.labs.harness.base import LabError
from course.tests.labs import reference_streams_vs_queues as ref
from course.tests.labs.lab_results import (
    assert_no_children_left,
    lab_json,
    live_tables,
    make_books,
    records,
    rows,
    run,
)
from library.models import Book, BookLedger, StockProjection
from messaging.models import (
    LogRetention,
    OutboxMessage,
    StreamConsumer,
)
from messaging.registry import MessageType, subscriptions_for

STREAMS = "streams-vs-queues"


def test_streams_vs_queues_defaults_reproduce_the_course():
    result = run(STREAMS)
    assert result["params"] == {"keep": 4}
    assert records(result, "storage") == [
        {"model": "single log", "files": 1, "bytes": 352},
        {"model": "subscription copy", "files": 3, "bytes": 1056},
    ]
    assert records(result, "offsets") == [
        {"consumer": "notification", "offset": 6},
        {"consumer": "stock-summary", "offset": 4},
        {"consumer": "report", "offset": 1},
    ]
    assert records(result, "replay") == [
        {"model": "queue", "written": 6, "first_consumer": 6, "later_consumer": 0},
        {"model": "stream", "written": 6, "first_consumer": 6, "later_consumer": 6},
    ]
    assert records(result, "retention") == [
        {"dropped": 6, "earliest_offset": 6, "lost_by_report": 4}
    ]
    # the lesson's other printed lines
    assert records(result, "lag") == [{"log_records": 6, "report_behind": 5}]
    assert rows(result, "log_head") == [
        [0, '{"type":"loan_issued","loanId":1,"bookId":1,"memberId":1}'],
        [1, '{"type":"loan_issued","loanId":2,"bookId":2,"memberId":2}'],
        [2, '{"type":"return_received","loanId":1,"bookId":1,"memberId":1}'],
    ]
    assert rows(result, "replay_state") == [["queue", 0], ["stream", 6]]
    assert records(result, "rewind") == [
        {"rewound_to": 3, "reread": 3, "first_loan": 4}
    ]
    assert rows(result, "retention_log") == [
        ["before trim", 10, 0],
        ["after trim", 4, 6],
    ]
    assert rows(result, "retention_reads") == [
        ["before trim", "report", 2, 8, "readable"],
        ["after trim", "notification", 10, 0, "readable"],
        ["after trim", "report", 2, None, "trimmed"],
    ]


def test_streams_vs_queues_reference_agrees_with_the_lab_on_defaults():
    result = run(STREAMS)
    assert rows(result, "storage") == ref.storage()
    assert rows(result, "offsets") == ref.offsets()
    assert rows(result, "replay") == ref.replay()
    assert rows(result, "retention") == ref.retention(4)
    assert rows(result, "retention_reads") == ref.retention_reads(4)


@pytest.mark.parametrize("keep", [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 1_000_000])
def test_streams_vs_queues_matches_reference(keep):
    result = run(STREAMS, keep=keep)
    assert rows(result, "retention") == ref.retention(keep)
    assert rows(result, "retention_reads") == ref.retention_reads(keep)
    # only retention depends on keep
    assert rows(result, "storage") == ref.storage()
    assert rows(result, "offsets") == ref.offsets()
    assert rows(result, "replay") == ref.replay()


@settings(max_examples=25, deadline=None)
@given(keep=st.integers(0, 1_000_000))
def test_streams_retention_matches_reference_property(keep):
    result = run(STREAMS, keep=keep)
    assert rows(result, "retention") == ref.retention(keep)
    assert rows(result, "retention_reads") == ref.retention_reads(keep)


def test_retention_follows_the_course_subtraction_when_report_is_not_behind():
    # keep 9 drops one record: report at offset 2 is still readable, and the course's
    # "lost" subtraction is the (negative) margin left before the trim reaches it
    assert rows(run(STREAMS, keep=9), "retention") == [[1, 1, -1]]
    assert rows(run(STREAMS, keep=9), "retention_reads")[2] == [
        "after trim",
        "report",
        2,
        8,
        "readable",
    ]


def test_streams_vs_queues_command_sets_values():
    data = lab_json(STREAMS, "--set", "keep=0")
    assert data["tables"]["retention"]["rows"] == [[10, 10, 8]]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database
def test_streams_vs_queues_live_storage_replay_and_retention(redis_client):
    books = make_books()
    # A projection row the replay must rebuild: a book changed before the run.
    from library.services import stock_correct

    stock_correct(book_id=books[0], on_shelf=5)
    tables = live_tables("streams-vs-queues")

    copies = len(subscriptions_for(MessageType.STOCK_CORRECTED))
    [log_row, copy_row] = rows(tables, "live_storage")
    assert log_row[:3] == ["single log", 6, 6]
    assert copy_row[:3] == ["subscription copies", 6, 6 * copies]
    bodies = OutboxMessage.objects.filter(type="stock_corrected").order_by("-id")[:6]
    from course.labs.harness.live_streams import body_bytes

    assert log_row[3] == sum(body_bytes(m.body) for m in bodies)
    assert copy_row[3] == copies * log_row[3]

    ids = list(
        OutboxMessage.objects.filter(type="stock_corrected")
        .order_by("id")
        .values_list("id", flat=True)
    )
    ours = ids[1:]
    replay = rows(tables, "live_replay")
    assert replay == [
        ["live consumer, caught up", None, None, 3, 3, 0],
        [f"rewound to {ours[2]} (before the 4th)", ours[2], 3, 3, 3, 0],
        ["rewound to 0 with rebuild", 0, len(ids), 3, 3, 0],
    ]
    projection = dict(StockProjection.objects.values_list("book_id", "on_shelf"))
    assert projection == dict(
        Book.objects.filter(pk__in=books).values_list("id", "on_shelf")
    )
    assert projection[books[0]] == 5
    consumer = StreamConsumer.objects.get(name="stock_projection")
    assert (consumer.offset, consumer.state, consumer.rewound_to) == (ids[-1], "ok", 0)

    # Retention on the throwaway log only: the course's 6 dropped, 4 lost.
    assert rows(tables, "live_retention") == [[6, 7, 2, 4, "trimmed"]]
    assert rows(tables, "live_retention_reads") == [
        ["before trim", 10, 1, 2, 8, "ok"],
        ["after trim", 4, 7, 2, None, "trimmed"],
        ["consumer moves on", 4, 7, 2, None, "trimmed"],
    ]
    [[dropped, earliest, lost]] = rows(tables, "retention")
    assert (dropped, earliest + 1, lost) == (6, 7, 4)
    # This database's log was not trimmed.
    assert OutboxMessage.objects.filter(type="stock_corrected").count() == 7
    assert not LogRetention.objects.exists()
    assert BookLedger.objects.filter(book_id__in=books).count() == 7
    assert list(
        Book.objects.filter(pk__in=books)
        .order_by("pk")
        .values_list("on_shelf", flat=True)
    ) == [5, 3, 1]
    assert_no_children_left()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database
def test_streams_vs_queues_live_retention_follows_keep(redis_client):
    from course.labs.streams_vs_queues.live import live_retention, retention_rows

    row, reads = retention_rows(live_retention(8))
    # Keeping 8 of 10 drops 2: the consumer at offset 2 loses nothing.
    assert row == [2, 3, 2, 0, "ok"]
    assert reads[1:] == [
        ["after trim", 8, 3, 2, 8, "ok"],
        ["consumer moves on", 8, 3, 10, 0, "ok"],
    ]
    row, _ = retention_rows(live_retention(1))
    assert row == [9, 10, 2, 7, "trimmed"]


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.each_database
def test_streams_vs_queues_live_refuses_keep_zero_and_a_trimmed_consumer():
    with pytest.raises(LabError, match="keep >= 1"):
        live_tables("streams-vs-queues", keep=0)
    StreamConsumer.objects.create(name="stock_projection", state="trimmed")
    with pytest.raises(LabError, match="rewind it"):
        live_tables("streams-vs-queues")

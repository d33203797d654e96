"""The monthly loan report run in this process: chunks, checkpoint, cancel, resume.

``report_execute`` runs here directly (the rq worker calls the same function); its
``announce`` hook runs right after each checkpoint, which is where the tests play
the part of the outside world: a user pressing Cancel, SIGTERM, a stolen lease.
"""

from __future__ import annotations

import datetime
import os
import signal
import uuid
from typing import Any

import pytest
from django.utils import timezone

from jobs.models import JobStatus
from jobs.selectors import jobstatus_payload, jobstatus_resumable
from jobs.services import CancelOutcome, jobstatus_claim
from library import report
from library.models import Book, Branch, Loan, Member
from library.report.start import monthly_report_start_for_slot

pytestmark = pytest.mark.django_db

PICKUP = datetime.date(2025, 3, 2)
LOANS = 100
CHUNK = 7  # 15 chunks, the last one short


def make_loans(count: int = LOANS) -> dict[str, Any]:
    """Loans 1..count over two branches; loan i is out ``i % 30`` days, every
    tenth is still open (counted up to the report's cut date)."""
    north = Branch.objects.create(name="North", city="A")
    south = Branch.objects.create(name="South", city="B")
    books = [
        Book.objects.create(title="N", author="x", branch=north),
        Book.objects.create(title="S", author="y", branch=south),
    ]
    member = Member.objects.create(first_name="A", last_name="B", registered_at=PICKUP)
    Loan.objects.bulk_create(
        Loan(
            book=books[i % 2],
            member=member,
            pickup_date=PICKUP,
            return_date=None
            if i % 10 == 0
            else PICKUP + datetime.timedelta(days=i % 30),
        )
        for i in range(1, count + 1)
    )
    return {"north": north, "south": south}


def expected_days(as_of: datetime.date, count: int = LOANS) -> int:
    open_days = (as_of - PICKUP).days
    return sum(open_days if i % 10 == 0 else i % 30 for i in range(1, count + 1))


def start(**kwargs: Any) -> JobStatus:
    kwargs.setdefault("month", report.ALL_MONTHS)
    kwargs.setdefault("chunk", CHUNK)
    return report.monthly_report_start(**kwargs)


def run(job: JobStatus, announce: Any = None, **kwargs: Any) -> str:
    if announce is not None:
        kwargs["announce"] = announce
    else:
        kwargs["announce"] = lambda job, checkpoint, progress: None
    return report.report_execute(job_id=job.pk, **kwargs)


def row(job: JobStatus) -> Any:  # JSON fields read as Any
    return JobStatus.objects.get(pk=job.pk)


def cancel_after(chunks: int, reason: str = report.REASON_USER) -> Any:
    """An announce hook that presses Cancel once ``chunks`` chunks are stored."""
    seen = {"n": 0}

    def hook(job: JobStatus, checkpoint: dict[str, Any], progress: float) -> None:
        seen["n"] += 1
        if seen["n"] == chunks:
            report.report_cancel(job_id=job.pk, reason=reason)

    return hook


@pytest.fixture
def loans() -> dict[str, Any]:
    return make_loans()


@pytest.fixture
def clean_result(loans: dict[str, Any]) -> dict[str, Any]:
    """The result of an uninterrupted run over the same loans."""
    job = start()
    assert run(job) == "done"
    result = row(job).result
    assert isinstance(result, dict)
    JobStatus.objects.filter(pk=job.pk).delete()
    return result


def test_uninterrupted_report_counts_every_loan_once(loans):
    job = start()
    assert job.params["total"] == LOANS
    assert run(job) == "done"
    done = row(job)
    assert done.state == "done"
    assert done.progress == 100
    assert done.lease_owner == ""
    as_of = datetime.date.fromisoformat(done.params["as_of"])
    assert as_of == timezone.localdate()
    result = done.result
    assert result["processed"] == LOANS
    assert result["days"] == expected_days(as_of)
    north = next(r for r in result["branches"] if r["branch"] == "North")
    # Even loans are North's: 50 loans, 10 of them (every tenth) still open.
    assert (north["loans"], north["returned"], north["open"]) == (50, 40, 10)
    assert done.checkpoint["last_id"] == max(Loan.objects.values_list("pk", flat=True))
    # 15 chunks: 14 checkpoints, then the completion write.
    assert done.checkpoint["processed"] == LOANS


@pytest.mark.parametrize("cancel_at_chunk", [1, 2, 5, 9, 13, 14])
def test_resume_never_double_counts(clean_result, cancel_at_chunk):
    job = start()
    assert run(job, cancel_after(cancel_at_chunk)) == "cancelled"
    stopped = row(job)
    assert stopped.state == "cancelled"
    assert stopped.cancel_reason == report.REASON_USER
    # The request was read at the very next boundary: nothing past that chunk.
    assert stopped.checkpoint["processed"] == cancel_at_chunk * CHUNK
    assert jobstatus_resumable(stopped)

    report.report_resume(job_id=job.pk)
    assert row(job).state == "queued"
    assert row(job).cancel_requested_at is None
    assert run(job) == "done"
    assert row(job).result == clean_result


def test_cancel_resume_cancel_resume_still_counts_once(clean_result):
    job = start()
    for chunks in (3, 4, 2):
        assert run(job, cancel_after(chunks)) == "cancelled"
        report.report_resume(job_id=job.pk)
    assert row(job).checkpoint["processed"] == (3 + 4 + 2) * CHUNK
    assert run(job) == "done"
    assert row(job).result == clean_result


def test_the_last_chunk_completes_without_another_boundary(loans):
    job = start()
    calls = []
    assert run(job, lambda *args: calls.append(args[1]["processed"])) == "done"
    # 15 chunks: 14 checkpoints are announced; the 15th (short) one completes the
    # report in the same write, so a request arriving during it is never read.
    assert calls == [CHUNK * k for k in range(1, 15)]
    assert row(job).checkpoint["processed"] == LOANS


def test_checkpoint_is_stored_before_progress_is_announced(loans):
    job = start()
    announced = []

    def hook(job: JobStatus, checkpoint: dict[str, Any], progress: float) -> None:
        stored = row(job)  # a different read: only what was committed
        assert stored.checkpoint == checkpoint
        assert stored.progress == pytest.approx(progress)
        announced.append(stored.checkpoint["processed"])

    assert run(job, hook) == "done"
    assert announced == [CHUNK * k for k in range(1, 15)]


def test_a_worker_dying_mid_chunk_loses_only_that_chunk(clean_result):
    job = start()

    class Died(Exception):
        pass

    def die(job: JobStatus, checkpoint: dict[str, Any], progress: float) -> None:
        if checkpoint["processed"] == 4 * CHUNK:
            raise Died  # stands for SIGKILL: no cleanup, the lease stays

    with pytest.raises(Died):
        run(job, die)
    abandoned = row(job)
    assert abandoned.state == "running"
    assert not jobstatus_resumable(abandoned)  # its lease still holds
    JobStatus.objects.filter(pk=job.pk).update(
        leased_until=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert jobstatus_resumable(row(job))
    report.report_resume(job_id=job.pk)
    assert run(job) == "done"
    assert row(job).result == clean_result


def test_time_limit_cancels_at_a_boundary_and_resumes(clean_result):
    job = start(time_limit_s=0.25, pause_ms=100)
    assert run(job) == "cancelled"
    stopped = row(job)
    assert stopped.cancel_reason == "time limit (0.25 s)"
    processed = stopped.checkpoint["processed"]
    assert 0 < processed < LOANS
    assert processed % CHUNK == 0
    report.report_resume(job_id=job.pk)
    # Each attempt gets its own budget; with no pause the rest fits in it.
    JobStatus.objects.filter(pk=job.pk).update(params={**stopped.params, "pause_ms": 0})
    assert run(job) == "done"
    assert row(job).result == clean_result


@pytest.fixture
def default_sigterm() -> Any:
    """SIGTERM at its default, as in an rq work-horse, whatever ran before.

    A test that ran an rq SimpleWorker in this process (jobs.tests, which now run
    before these) leaves the worker's handler installed; chained, it would raise.
    """
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_finishes_the_chunk_and_marks_worker_shutdown(
    clean_result, default_sigterm
):
    job = start()
    previous = signal.getsignal(signal.SIGTERM)

    def sigterm_after_three(job, checkpoint, progress):
        if checkpoint["processed"] == 3 * CHUNK:
            os.kill(os.getpid(), signal.SIGTERM)

    assert run(job, sigterm_after_three) == "cancelled"
    assert signal.getsignal(signal.SIGTERM) is previous  # handler restored
    stopped = row(job)
    assert stopped.cancel_reason == report.REASON_SHUTDOWN
    assert stopped.message == "cancelled: worker shutdown"
    assert stopped.checkpoint["processed"] == 3 * CHUNK
    report.report_resume(job_id=job.pk)
    assert run(job) == "done"
    assert row(job).result == clean_result


def test_a_lost_lease_stops_the_old_holder_without_writing(clean_result):
    job = start()

    def taken_over(job, checkpoint, progress):
        if checkpoint["processed"] == 2 * CHUNK:
            # The holder stalled past its lease and another worker claimed the row.
            JobStatus.objects.filter(pk=job.pk).update(
                leased_until=timezone.now() - datetime.timedelta(seconds=1)
            )
            assert jobstatus_claim(job_id=job.pk, owner="worker-b", lease_s=60)

    assert run(job, taken_over, owner="worker-a") == "lost"
    after = row(job)
    assert after.lease_owner == "worker-b"
    assert after.state == "running"
    assert after.checkpoint["processed"] == 2 * CHUNK  # A wrote nothing more
    # worker-b's run stalls too; a third worker takes over once its lease ends.
    JobStatus.objects.filter(pk=job.pk).update(
        leased_until=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert run(job, owner="worker-c") == "done"
    assert row(job).result == clean_result


def test_a_renewal_finding_another_owner_writes_nothing(loans):
    job = start()

    def steal(job, checkpoint, progress):
        # Another owner while this run is still inside its lease (a wrong clock,
        # an operator): the next checkpoint write is refused by the owner check.
        JobStatus.objects.filter(pk=job.pk).update(lease_owner="intruder")

    before = None

    def hook(job, checkpoint, progress):
        nonlocal before
        before = row(job).version
        steal(job, checkpoint, progress)

    assert run(job, hook, owner="me") == "lost"
    after = row(job)
    assert after.version == before  # nothing written after the steal
    assert after.checkpoint["processed"] == CHUNK


def test_cancelling_a_queued_report_cancels_it_at_once(loans):
    job = start()
    assert report.report_cancel(job_id=job.pk, reason="x") == CancelOutcome.CANCELLED
    assert row(job).state == "cancelled"
    assert run(job) == "skipped"  # the worker's claim finds nothing to do
    assert report.report_cancel(job_id=job.pk, reason="x") == CancelOutcome.FINISHED


def test_second_cancel_request_is_reported_as_already_asked(loans):
    job = start()
    outcomes = []

    def twice(job, checkpoint, progress):
        if checkpoint["processed"] == CHUNK:
            outcomes.append(report.report_cancel(job_id=job.pk, reason="a"))
            outcomes.append(report.report_cancel(job_id=job.pk, reason="b"))

    assert run(job, twice) == "cancelled"
    assert outcomes == [CancelOutcome.REQUESTED, CancelOutcome.ALREADY]
    assert row(job).cancel_reason == "a"


def test_done_and_running_reports_cannot_be_resumed(loans):
    job = start()
    with pytest.raises(report.ReportError, match="queued report cannot be resumed"):
        report.report_resume(job_id=job.pk)
    run(job)
    with pytest.raises(report.ReportError, match="done report cannot be resumed"):
        report.report_resume(job_id=job.pk)
    with pytest.raises(report.ReportError, match="no such report"):
        report.report_resume(job_id=uuid.uuid4())


def test_with_no_arguments_it_reports_the_previous_month():
    make_loans(0)
    today = timezone.localdate()
    last_month_day = today.replace(day=1) - datetime.timedelta(days=1)
    branch = Branch.objects.get(name="North")
    book = Book.objects.get(branch=branch)
    member = Member.objects.get()
    Loan.objects.create(
        book=book, member=member, pickup_date=last_month_day, return_date=None
    )
    Loan.objects.create(book=book, member=member, pickup_date=today, return_date=None)
    job = report.monthly_report_start()
    assert job.kind == "report"
    assert job.created_by is None
    assert job.params["month"] == f"{last_month_day:%Y-%m}"
    assert job.params["as_of"] == today.replace(day=1).isoformat()
    assert job.params["total"] == 1
    assert run(job) == "done"
    # Open at the cut date: out from the last day of the month to the first of the next.
    assert row(job).result["days"] == 1
    assert row(job).result["branches"][0]["open"] == 1


def test_month_and_branch_scope_and_bad_requests(loans):
    Loan.objects.create(
        book=Book.objects.get(title="N"),
        member=Member.objects.get(),
        pickup_date=datetime.date(2025, 4, 1),
        return_date=datetime.date(2025, 4, 3),
    )
    march = start(month="2025-03", branch=loans["south"].pk)
    assert march.params["total"] == 50
    assert march.params["as_of"] == "2025-04-01"
    assert run(march) == "done"
    rows = row(march).result["branches"]
    assert [r["branch"] for r in rows] == ["South"]
    # Odd loans i: out i % 30 days (none of them is a tenth, so all returned
    # by the cut date except those past April 1st: none, 29 days at most).
    assert rows[0]["days"] == sum(i % 30 for i in range(1, LOANS + 1, 2))
    with pytest.raises(report.ReportError, match="month must look like"):
        start(month="March")
    with pytest.raises(report.ReportError, match="no branch"):
        start(branch=999_999)
    with pytest.raises(report.ReportError, match="chunk"):
        start(chunk=0)


def test_csv_rows_of_a_finished_report(loans):
    job = start(month="2025-03")
    run(job)
    rows = list(report.report_csv_rows(row(job)))
    assert rows[0] == report.CSV_COLUMNS
    north, south, total = rows[1], rows[2], rows[3]
    as_of = datetime.date(2025, 4, 1)
    north_days = sum(
        (as_of - PICKUP).days if i % 10 == 0 else i % 30 for i in range(2, 101, 2)
    )
    assert north[1:] == ["North", 50, 40, 10, north_days, round(north_days / 50, 2)]
    assert south[1:6] == ["South", 50, 50, 0, sum(i % 30 for i in range(1, 100, 2))]
    assert total[:6] == ["", "total", 100, 90, 10, int(north[5]) + int(south[5])]


def test_status_payload_carries_counts_and_resumability(loans):
    job = start()
    run(job, cancel_after(2))
    payload = jobstatus_payload(row(job))
    assert payload["processed"] == 14
    assert payload["total"] == LOANS
    assert payload["cancel_reason"] == report.REASON_USER
    assert payload["resumable"] is True
    assert payload["finished"] is True


def test_the_scheduled_start_makes_one_report_per_month(redis_client):
    slot = datetime.datetime(2025, 4, 1, 2, 0, tzinfo=datetime.UTC)
    first = monthly_report_start_for_slot(slot=slot)
    # An operator's "run now" beside the scheduled slot: the same month's report.
    assert monthly_report_start_for_slot(slot=slot) == first
    assert JobStatus.objects.filter(kind="report").count() == 1
    JobStatus.objects.filter(pk=first).update(state="failed")
    assert monthly_report_start_for_slot(slot=slot) != first  # a failed one is redone
    later = datetime.datetime(2025, 5, 1, 2, 0, tzinfo=datetime.UTC)
    assert monthly_report_start_for_slot(slot=later) not in (first,)
    assert JobStatus.objects.filter(kind="report").count() == 3


def test_month_bounds_end_where_a_date_can():
    assert report.month_bounds("2025-12") == (
        datetime.date(2025, 12, 1),
        datetime.date(2026, 1, 1),
    )
    assert report.month_bounds("9999-11")[1] == datetime.date(9999, 12, 1)
    for month in ("9999-12", "0-01", "2025-13", "2025", "x-y", "9" * 30 + "-01"):
        with pytest.raises(report.ReportError):
            report.month_bounds(month)

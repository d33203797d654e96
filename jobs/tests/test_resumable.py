"""jobs.resumable: jobs knows no resumable kind by name; an app registers its own."""

from __future__ import annotations

import uuid

import pytest

from jobs import resumable
from jobs.models import JobStatus
from jobs.resumable import JobRefused, jobstatus_resume, resumable_kind_register
from jobs.selectors import jobstatus_resumable

pytestmark = pytest.mark.django_db


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, resumable.Resume]:
    """A copy of the registry, put back after the test."""
    copy = dict(resumable._resumers)
    monkeypatch.setattr(resumable, "_resumers", copy)
    return copy


def test_the_library_registers_the_monthly_report() -> None:
    assert "report" in resumable.resumable_kinds()


def test_a_kind_nobody_registered_is_neither_resumable_nor_resumed(registry) -> None:
    row = JobStatus.objects.create(kind="lab", name="x", state="cancelled")
    assert not jobstatus_resumable(row)
    with pytest.raises(JobRefused):
        jobstatus_resume(job_id=row.pk)
    with pytest.raises(JobRefused):
        jobstatus_resume(job_id=uuid.uuid4())


def test_a_registered_kind_is_resumed_through_its_function(registry) -> None:
    seen: list[uuid.UUID] = []

    def resume(*, job_id: uuid.UUID) -> str:
        seen.append(job_id)
        return "queued"

    resumable_kind_register("demo", resume)
    row = JobStatus.objects.create(kind="demo", name="x", state="cancelled")
    assert jobstatus_resumable(row)
    assert jobstatus_resume(job_id=row.pk) == "queued"
    assert seen == [row.pk]

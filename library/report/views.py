"""The monthly loan report's pages: start, follow, cancel, resume, download.

Routed by ``library.report.urls`` under ``/jobs/`` (their URLs predate the move from
the jobs app). The page follows its row through the generic JobStatus poll,
``jobstatus-status`` (jobs.views).
"""

from __future__ import annotations

import csv
import datetime
import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from jobs.access import jobstatus_readable
from jobs.models import JobStatus
from jobs.selectors import jobstatus_payload
from jobs.views import no_store
from library import report
from library.models import Branch
from library.permissions import RUN_REPORT, permission_required
from library.report.selectors import report_get, report_recent
from library.views import HttpResponseSeeOther


class ReportStartForm(forms.Form):
    """What a staff member may choose when starting a report by hand."""

    month = forms.CharField(
        required=False,
        max_length=7,
        widget=forms.TextInput(
            attrs={"placeholder": "2025-03", "inputmode": "numeric"}
        ),
        help_text="Loans picked up in this month. Leave empty for every month.",
    )
    branch = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, help_text="One branch, or all."
    )
    chunk = forms.IntegerField(
        min_value=1,
        max_value=report.MAX_CHUNK,
        initial=report.DEFAULT_CHUNK,
        help_text="Loans per chunk: a cancel waits at most one chunk.",
    )
    pause_ms = forms.IntegerField(
        min_value=0,
        max_value=report.MAX_PAUSE_MS,
        initial=0,
        required=False,
        help_text="Wait after each chunk (ms), to watch a small report move.",
    )
    time_limit_s = forms.FloatField(
        required=False,
        min_value=0.1,
        help_text="Stop (cancelled, resumable) after this many seconds.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices: list[tuple[str, str]] = [("", "All branches")]
        choices += [(str(b.pk), str(b)) for b in Branch.objects.order_by("pk")]
        self.fields["branch"].choices = choices  # type: ignore[attr-defined]

    def clean_month(self) -> str:
        month = str(self.cleaned_data.get("month") or "").strip()
        if not month:
            return report.ALL_MONTHS
        try:
            datetime.date.fromisoformat(f"{month}-01")
            report.month_bounds(month)  # its end must be a date too (not 9999-12)
        except (ValueError, report.ReportError):
            raise forms.ValidationError("Give a month like 2025-03.") from None
        return month


def _report_or_404(request: HttpRequest, job_id: uuid.UUID) -> JobStatus:
    job = report_get(job_id=job_id)
    if job is None:
        raise Http404("No such report.")
    if not jobstatus_readable(job, request):
        raise PermissionDenied("This report belongs to someone else.")
    return job


def _month_label(job: JobStatus) -> str:
    month = str(job.params.get("month", "")) if isinstance(job.params, dict) else ""
    return "all months" if month == report.ALL_MONTHS else month


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


@never_cache
@permission_required(RUN_REPORT)
@require_http_methods(["GET", "POST"])
def report_start(request: HttpRequest) -> HttpResponse:
    """Show the report form and the latest reports; start one on POST."""
    form = ReportStartForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = report.monthly_report_start(
                user=request.user,
                month=data["month"],
                branch=data["branch"],
                chunk=data["chunk"],
                pause_ms=data["pause_ms"] or 0,
                time_limit_s=data["time_limit_s"],
            )
        except report.ReportError as error:
            form.add_error(None, str(error))
        else:
            return HttpResponseSeeOther(reverse("report-detail", args=[job.pk]))
    if request.method == "GET":
        form = ReportStartForm(
            initial={"month": report.previous_month(timezone.localdate())}
        )
    return render(
        request,
        "library/report/start.html",
        {"form": form, "reports": report_recent(limit=10)},
        status=400 if request.method == "POST" else 200,
    )


@never_cache
@login_required
@require_GET
def report_detail(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """Follow one report: live progress, Cancel, Resume, Download."""
    job = _report_or_404(request, job_id)
    return render(
        request,
        "library/report/detail.html",
        {
            "job": job,
            "month_label": _month_label(job),
            "payload": jobstatus_payload(job),
            "config": {
                "statusUrl": reverse("jobstatus-status", args=[job.pk]),
                "job": jobstatus_payload(job),
            },
        },
    )


@permission_required(RUN_REPORT)
@require_POST
def report_cancel_view(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """The page's Cancel button: record the request; the job stops at its next chunk."""
    job = _report_or_404(request, job_id)
    outcome = report.report_cancel(job_id=job.pk, reason=report.REASON_USER)
    if _wants_json(request):
        return no_store(JsonResponse({"outcome": str(outcome)}, status=202))
    messages.info(request, f"Cancel: {outcome}.")
    return HttpResponseSeeOther(reverse("report-detail", args=[job.pk]))


@permission_required(RUN_REPORT)
@require_POST
def report_resume_view(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """The page's Resume button: enqueue the report again from its checkpoint."""
    job = _report_or_404(request, job_id)
    try:
        report.report_resume(job_id=job.pk)
    except report.ReportError as error:
        if _wants_json(request):
            return no_store(JsonResponse({"error": str(error)}, status=409))
        messages.error(request, str(error))
    else:
        if _wants_json(request):
            return no_store(JsonResponse({"outcome": "queued"}, status=202))
        messages.success(request, "The report continues from its checkpoint.")
    return HttpResponseSeeOther(reverse("report-detail", args=[job.pk]))


class _Echo:
    """A file-like sink: ``csv.writer`` writes a row, ``write`` hands it back."""

    def write(self, value: str) -> str:
        return value


@login_required
@require_GET
def report_download(
    request: HttpRequest, job_id: uuid.UUID
) -> HttpResponse | StreamingHttpResponse:
    """Stream the finished report as CSV (staff, or whoever started it)."""
    job = _report_or_404(request, job_id)
    if job.state != JobStatus.State.DONE:
        return HttpResponse(
            "The report is not finished yet.", status=409, content_type="text/plain"
        )
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in report.report_csv_rows(job)),
        content_type="text/csv; charset=utf-8",
    )
    response["Content-Disposition"] = (
        f'attachment; filename="{report.report_filename(job)}"'
    )
    response["Cache-Control"] = "private, no-store"
    return response

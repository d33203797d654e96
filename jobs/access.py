"""Who may read a job's status: the one who started it, or whom its kind's rule lets.

A status carries the job's whole result (a report's totals, a lab run's tables), and
its random id was the only thing keeping it private: anyone holding a link read it.
Every read of a status by a request goes through ``jobstatus_readable``:

- the job's starter (``JobStatus.created_by``, signed in and active) may read it;
- anyone else only by the rule the job's kind registered with
  ``jobstatus_access_register`` from its app's ``AppConfig.ready()``, as resumable
  kinds are (``jobs.resumable``): jobs knows no kind by name. The monthly report
  lets holders of ``jobs.run_report`` read it (library); a lab run, which anonymous
  visitors start too, is its visitor's (course, which records the visitor);
- a kind without a rule is its starter's alone.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest

from jobs.models import JobStatus

# (job, request) -> may this request read the job? The request has ``user`` and
# ``session``; the rule runs where database reads are allowed.
ReadRule = Callable[[JobStatus, HttpRequest], bool]

_rules: dict[str, ReadRule] = {}


def jobstatus_access_register(kind: str, rule: ReadRule) -> None:
    """Let whoever ``rule`` accepts read jobs of ``kind`` besides their starter."""
    _rules[kind] = rule


def jobstatus_readable(job: JobStatus, request: HttpRequest) -> bool:
    """Return whether ``request`` may read ``job``'s status and result."""
    user = request.user
    if user.is_authenticated and user.is_active and job.created_by_id == user.pk:
        return True
    rule = _rules.get(job.kind)
    return rule is not None and rule(job, request)

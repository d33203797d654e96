"""What happens to a job whose worker died: nothing stays stuck in rq's registries.

rq supervises its own work-horses: a job whose horse is killed is retried while its
``Retry`` policy has attempts left, then lands in the failed registry. One gap
remains, and this module closes it: a cold shutdown (a second SIGTERM) kills the
horse too, but leaves the job in the started registry until its entry expires, and
rq's own maintenance runs rarely (every ten minutes by default). ``rq_maintenance``
runs it every minute from the scheduler, so an abandoned job is retried or failed
within a minute or two.

Jobs with a status row of their own hold a lease on it and say what an expired
lease means: a report resumes (``library.report``), a lab run fails with a reason
(``course.services.labwork.lab_runs_expire``).
"""

from __future__ import annotations

import django_rq
from django.conf import settings
from rq.registry import StartedJobRegistry


def rq_maintenance() -> dict[str, int]:
    """Hand back abandoned jobs: retried, or failed once their retries are spent."""
    cleaned = 0
    for name in settings.RQ_QUEUES:
        StartedJobRegistry(queue=django_rq.get_queue(name)).cleanup()
        cleaned += 1
    return {"queues": cleaned}

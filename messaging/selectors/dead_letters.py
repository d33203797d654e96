"""Dead letters: how many of a letter's attempts killed their worker."""

from __future__ import annotations

from django.db.models import Case, F, IntegerField, Q, QuerySet, Value, When

from messaging.models import DeadLetter, Delivery


def worker_deaths() -> Case:
    """Return the expression counting an open letter's attempts that killed a worker.

    An attempt is counted when a worker claims the delivery; a failure only when the
    worker lives to record it (``Delivery.failures``). The attempt that made the
    letter (the failing last one, or the one refused because workers died before)
    is neither, so ``attempts - 1 - failures`` attempts ended with no word from
    their worker: it died, or lost its lease mid-run. A dying group's try
    (``Delivery.group_tries``) is blamed on the delivery only when it also killed a
    worker alone, as ``process.death_count`` decides. The delivery keeps these
    counts while it is dead; a redrive resets them, so only open letters (delivery
    still dead) are counted.
    """
    silent = F("attempts") - 1 - F("delivery__failures")
    open_letter = Q(
        redriven_at__isnull=True,
        discarded_at__isnull=True,
        delivery__status=Delivery.Status.DEAD,
    )
    return Case(
        When(
            open_letter
            & Q(attempts__gt=F("delivery__failures") + 1 + F("delivery__group_tries")),
            then=silent,
        ),
        default=Value(0),
        output_field=IntegerField(),
    )


def dead_letter_rows(queryset: QuerySet[DeadLetter]) -> QuerySet[DeadLetter]:
    """Annotate dead letters with ``worker_deaths`` (see ``worker_deaths``)."""
    return queryset.annotate(worker_deaths=worker_deaths())

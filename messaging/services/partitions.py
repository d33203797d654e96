"""Ordered subscriptions: deliveries split by key into partitions, one worker each.

A subscription declared with ``partitions=N`` gets, at relay time, the partition of
each copy (``policies.partition_of(message.key, N)``). Its deliveries are never in
the ordinary batches: a worker first takes a partition's lease (a row per partition,
claimed by compare-and-set, expiring so a dead worker's partition is taken over),
then works through that partition's deliveries strictly in offset order. Every
message of one key is in one partition, so a key's messages are applied in the order
they were published, while N partitions run on up to N workers at once.

Head-of-line blocking is the price, on purpose: while the oldest pending delivery of
a partition waits for its retry, the partition waits with it (skipping ahead would
apply a later change of the same key first). A head that keeps failing goes to the
dead letters after its attempts, exactly as in the unordered path, and the partition
flows again. Each head is claimed like any delivery (attempt counted at claim time,
with a lease), so a poison head that kills workers is isolated too.
"""

from __future__ import annotations

import datetime
import functools
import logging
from typing import Any

from django.db import connection
from django.db.models import Case, Count, F, Q, Value, When
from django.utils import timezone

from messaging.models import Delivery, OutboxMessage, PartitionLease
from messaging.registry import SUBSCRIPTIONS, Subscription
from messaging.services.claim import lease_length
from messaging.services.process import (
    Outcome,
    after_batch_run,
    delivery_process,
    group_commit,
)
from messaging.services.rows import column, reader, table, value_reader

log = logging.getLogger("messaging")

# Deliveries one partition processes per turn before the worker moves on, so one
# busy partition cannot keep a worker from the others for a whole drain.
PARTITION_TURN = 50


def partitioned_subscriptions(lane: str | None = None) -> list[Subscription]:
    return [
        s
        for s in SUBSCRIPTIONS.values()
        if s.partitions > 0 and (lane is None or s.lane == lane)
    ]


def _ensure_leases(subscription: Subscription) -> None:
    """Create the subscription's missing lease rows (a read when none is missing)."""
    have = PartitionLease.objects.filter(subscription=subscription.name).count()
    if have >= subscription.partitions:
        return
    PartitionLease.objects.bulk_create(
        [
            PartitionLease(subscription=subscription.name, partition=p)
            for p in range(subscription.partitions)
        ],
        ignore_conflicts=True,
    )


def _pending(subscription: str, partition: int) -> Any:
    return Delivery.objects.filter(
        subscription=subscription, partition=partition, status=Delivery.Status.PENDING
    )


# Pending deliveries read from each free partition's head on every pass: a
# trickle's few per partition commit with the heads as one group, with no read of
# their own; the rest of a backlog goes by turns (``PARTITION_TURN`` each).
RUN_READ = 16


def _free_heads(
    subscription: Subscription, now: datetime.datetime
) -> dict[int, Delivery]:
    """Return the oldest pending delivery of each partition whose lease is free."""
    return {p: run[0] for p, run in _free_runs(subscription, now).items()}


def _free_runs(
    subscription: Subscription, now: datetime.datetime
) -> dict[int, list[Delivery]]:
    """Return up to ``RUN_READ`` pending deliveries of each partition whose lease
    is free, from its head, in offset order.

    One statement whatever the backlog: the lease rows, each joined to its
    partition's first pending deliveries (found by one probe of the partial index
    on subscription, partition and message: a LIMIT per partition, never a scan of
    the backlog) and their messages. Written by hand and built once per process:
    the ORM's statements cost an empty pass more CPU than anything but the claim.
    Missing lease rows are created the first time.
    """
    leases, rows = _heads_read(subscription.name, now)
    if leases < subscription.partitions:
        _ensure_leases(subscription)
        leases, rows = _heads_read(subscription.name, now)
    runs: dict[int, list[Delivery]] = {}
    for until, delivery in rows:
        if delivery is None or delivery.partition is None:
            continue
        if until is None or until < now:
            runs.setdefault(delivery.partition, []).append(delivery)
    return runs


@functools.cache
def _heads_sql(vendor: str) -> str:
    """Return the lease rows joined to their partitions' first pending deliveries.

    PostgreSQL probes the index once per lease row (LATERAL ... LIMIT); SQLite has
    no LATERAL, and probes it as the delivery ids IN a correlated LIMIT subquery
    (the same rows; PostgreSQL would filter every delivery through that subquery).
    A leased partition gives its lease row alone, nothing to read.
    """
    lease, delivery = table(PartitionLease), table(Delivery)

    def d(field: str) -> str:
        return column(Delivery, field)

    def p(field: str) -> str:
        return column(PartitionLease, field)

    heads, messages = reader(Delivery, "d"), reader(OutboxMessage, "m")
    leading = f"""
        FROM {delivery} AS h
        WHERE h.{d("subscription")} = l.{p("subscription")}
            AND h.{d("partition")} = l.{p("partition")}
            AND h.{d("status")} = %s
            AND (l.{p("leased_until")} IS NULL OR l.{p("leased_until")} < %s)
        ORDER BY h.{d("message")} LIMIT %s
    """
    if vendor == "postgresql":
        join = f"LEFT JOIN LATERAL (SELECT h.* {leading}) AS d ON true"
    else:
        join = f"""LEFT JOIN {delivery} AS d
            ON d.{d("id")} IN (SELECT h.{d("id")} {leading})"""
    return f"""
        SELECT l.{p("partition")}, l.{p("leased_until")}, {heads.columns},
            {messages.columns}
        FROM {lease} AS l
        {join}
        LEFT JOIN {table(OutboxMessage)} AS m
            ON m.{column(OutboxMessage, "id")} = d.{d("message")}
        WHERE l.{p("subscription")} = %s
        ORDER BY l.{p("partition")}, d.{d("message")}
    """


def _heads_read(
    subscription: str, now: datetime.datetime
) -> tuple[int, list[tuple[Any, Delivery | None]]]:
    """Return the lease rows read, and each row's ``leased_until`` and delivery."""
    heads, messages = reader(Delivery, "d"), reader(OutboxMessage, "m")
    # leased_until through its field's converters (a string on SQLite).
    until_of = value_reader(PartitionLease, "leased_until", "l")
    with connection.cursor() as cursor:
        cursor.execute(
            _heads_sql(connection.vendor),
            [
                Delivery.Status.PENDING.value,
                connection.ops.adapt_datetimefield_value(now),
                RUN_READ,
                subscription,
            ],
        )
        rows = cursor.fetchall()
    read: list[tuple[Any, Delivery | None]] = []
    for row in rows:
        until, values = until_of(row[1]), row[2:]
        if values[0] is None:
            read.append((until, None))
            continue
        delivery = heads.read(values)
        delivery.message = messages.read(values[heads.width :])
        read.append((until, delivery))
    return len({row[0] for row in rows}), read


def _head_ready(head: Delivery | None, now: datetime.datetime) -> bool:
    """Whether the partition's oldest pending delivery may be tried now."""
    if head is None or head.available_at > now:
        return False
    return head.leased_until is None or head.leased_until < now


def _lease_free(now: datetime.datetime) -> Q:
    return Q(leased_until__isnull=True) | Q(leased_until__lt=now)


def partition_work(now: datetime.datetime, *, lane: str = "main") -> bool:
    """Return whether some partition of ``lane`` has a head ready and a free lease."""
    return any(
        _head_ready(head, now)
        for subscription in partitioned_subscriptions(lane)
        for head in _free_heads(subscription, now).values()
    )


def partitions_drain(
    *, owner: str, lane: str, deadline: datetime.datetime
) -> list[Outcome]:
    """Give each free partition of ``lane`` with a ready head a turn.

    First the fresh runs of all the free partitions commit as one group; a
    partition with more behind its run (or a head tried before) takes a turn then.
    """
    outcomes: list[Outcome] = []
    for subscription in partitioned_subscriptions(lane):
        runs = _free_runs(subscription, timezone.now())
        worked = bool(runs)
        fresh = _fresh_runs(subscription, runs, timezone.now())
        grouped = _heads_commit(subscription, fresh, owner)
        if grouped is not None:
            outcomes += grouped
            # Read again what waits behind the runs just done, or the runs as they
            # were given back: it takes its turn below, in order. Nothing waited
            # when read: the next pass sees what came since, as it would anyway.
            behind = not grouped or _left_behind(runs, fresh)
            runs = _free_runs(subscription, timezone.now()) if behind else {}
        # A run given back goes one by one: grouped again, its bad member (if it is
        # one) would be rolled back a second time, and each good one before it.
        alone = (
            {p: run[-1].message_id for p, run in fresh.items()} if grouped == [] else {}
        )
        for partition in sorted(runs):
            if timezone.now() >= deadline:
                return outcomes
            if not _head_ready(runs[partition][0], timezone.now()):
                continue
            if not _lease_take(subscription, partition, owner):
                continue
            done: list[Outcome] = []
            uncounted = 0
            try:
                done, uncounted = _turn(
                    subscription,
                    partition,
                    owner,
                    deadline,
                    runs[partition],
                    alone.get(partition, 0),
                )
            finally:
                _lease_release(subscription.name, partition, owner, uncounted)
            outcomes += done
        if worked:
            after_batch_run({subscription.name})
    return outcomes


def _fresh_runs(
    subscription: Subscription,
    runs: dict[int, list[Delivery]],
    now: datetime.datetime,
) -> dict[int, list[Delivery]]:
    """Return each partition's run of fresh deliveries from its head (a turn's at
    most), for the partitions that have one."""
    fresh = {p: _fresh_run(subscription, runs[p], now)[:PARTITION_TURN] for p in runs}
    return {p: run for p, run in fresh.items() if run}


def _left_behind(
    runs: dict[int, list[Delivery]], fresh: dict[int, list[Delivery]]
) -> bool:
    """Whether a partition read held more than its fresh run, or may have (a read
    cut at ``RUN_READ``)."""
    return any(
        len(runs[p]) >= RUN_READ or len(fresh.get(p, ())) < len(runs[p]) for p in runs
    )


def _heads_commit(
    subscription: Subscription, fresh: dict[int, list[Delivery]], owner: str
) -> list[Outcome] | None:
    """Commit the fresh runs of the partitions as one group: their outcomes, [] if
    it did not, None if there were not two deliveries to try.

    At a steady trickle most partitions with work hold one or two deliveries, and
    a turn each cost a dozen statements (lease, read, claim, a transaction,
    release) for them. Each run is its partition's oldest pending deliveries, never
    tried, in offset order (the group's effects run in that order), so taking them
    together keeps every partition's order: one lease statement, one claim, one
    transaction, one release. Anything short of all of them (a lease or a claim
    another worker won, a failing member) gives everything back as it was, and the
    partitions take their turns one by one.
    """
    group = [delivery for p in sorted(fresh) for delivery in fresh[p]]
    if len(group) < 2:
        return None
    now = timezone.now()
    lease_until = now + _lease_length(subscription)
    leases = PartitionLease.objects.filter(
        subscription=subscription.name, partition__in=sorted(fresh)
    )
    won = leases.filter(_lease_free(now)).update(owner=owner, leased_until=lease_until)
    committed: list[Outcome] = []
    if won == len(fresh):
        committed = _run_commit(group, owner, lease_until)
    counts = [When(partition=p, then=Value(len(run))) for p, run in fresh.items()]
    leases.filter(owner=owner).update(
        owner="",
        leased_until=None,
        processed=F("processed") + (Case(*counts, default=0) if committed else 0),
    )
    return committed


def _lease_length(subscription: Subscription) -> datetime.timedelta:
    return lease_length(subscription.name)


def _lease_take(subscription: Subscription, partition: int, owner: str) -> bool:
    now = timezone.now()
    won = PartitionLease.objects.filter(
        _lease_free(now), subscription=subscription.name, partition=partition
    ).update(owner=owner, leased_until=now + _lease_length(subscription))
    return won == 1


def _lease_release(subscription: str, partition: int, owner: str, done: int) -> None:
    """Free the lease, counting the turn's last ``done`` deliveries not yet counted.

    Owner-checked: a worker whose lease ran out must not free its successor's.
    """
    PartitionLease.objects.filter(
        subscription=subscription, partition=partition, owner=owner
    ).update(owner="", leased_until=None, processed=F("processed") + done)


def _turn(
    subscription: Subscription,
    partition: int,
    owner: str,
    deadline: datetime.datetime,
    read: list[Delivery],
    alone_upto: int = 0,
) -> tuple[list[Outcome], int]:
    """Process the partition's deliveries in offset order until one must wait.

    Returns the outcomes and how many of them no lease renewal has counted yet (the
    release counts those). A read that shows nothing behind what was just done ends
    the turn without reading again: at a steady trickle most partitions hold one or
    two deliveries, and a second look per turn was a statement each.

    The first rows are ``read``, the pass's read of the partition (up to
    ``RUN_READ``), taken before the lease: every claim checks its rows are still
    as read (attempts, status, no lease), and a claim that finds them changed reads
    the partition again.

    A run that failed as a group goes one by one up to its last message (message
    ids up to ``alone_upto`` run one by one): grouping what is left of it again
    would roll the same bad member back once per good one before it.
    """
    outcomes: list[Outcome] = []
    counted = 0
    lease = _lease_length(subscription)
    first: list[Delivery] | None = read
    while len(outcomes) < PARTITION_TURN:
        now = timezone.now()
        if now >= deadline:
            break
        limit = PARTITION_TURN - len(outcomes)
        if first is not None:
            # Fewer rows than this means the partition was empty behind them.
            rows, full = first[:limit], min(limit, RUN_READ)
        else:
            rows, full = _leading(subscription.name, partition, limit), limit
        stale, first = first is not None, None
        run = _fresh_run(subscription, rows, now)
        if run and run[0].message_id <= alone_upto:
            run = []
        if len(run) > 1:
            grouped = _run_commit(run, owner, now + lease)
            if grouped:
                outcomes += grouped
                if len(run) == len(rows) < full:
                    break  # the partition was empty behind the run
                if not _lease_renew(
                    subscription.name, partition, owner, len(outcomes) - counted
                ):
                    break
                counted = len(outcomes)
                continue
            # Given back as it was: read again, for the head's state as it is now.
            alone_upto = run[-1].message_id
            rows, full, stale = (
                _leading(subscription.name, partition, limit),
                limit,
                False,
            )
        head = rows[0] if rows else None
        if not _head_ready(head, now):
            break
        assert head is not None
        if not _claim_head(head, owner, now + lease):
            if stale:
                continue  # changed since the pass read it: read it as it is
            break
        outcome = delivery_process(head, owner=owner)
        outcomes.append(outcome)
        if outcome.result in ("retry", "lost_lease"):
            break  # the head waits for its retry, and the partition with it
        if len(rows) == 1 < full:
            break  # it was the partition's last
        if not _lease_renew(
            subscription.name, partition, owner, len(outcomes) - counted
        ):
            break
        counted = len(outcomes)
    return outcomes, len(outcomes) - counted


def _lease_renew(subscription: str, partition: int, owner: str, done: int) -> bool:
    renewed = PartitionLease.objects.filter(
        subscription=subscription, partition=partition, owner=owner
    ).update(
        leased_until=timezone.now() + lease_length(subscription),
        processed=F("processed") + done,
    )
    if not renewed:
        log.warning("lost the lease of %s[%s]", subscription, partition)
    return bool(renewed)


def _leading(subscription: str, partition: int, limit: int) -> list[Delivery]:
    """Return up to ``limit`` of the partition's pending deliveries from its head."""
    pending = _pending(subscription, partition).select_related("message")
    return list(pending.order_by("message_id")[:limit])


def _fresh_run(
    subscription: Subscription, rows: list[Delivery], now: datetime.datetime
) -> list[Delivery]:
    """Return the leading ``rows`` that were never tried and are ready, in order.

    Only a run from the head: the first delivery tried before (it may be the one
    that kills workers) or not ready yet ends it, and goes the one-by-one way.
    """
    if subscription.outside:
        return []  # its slow part runs outside any transaction: never in a group
    run: list[Delivery] = []
    for delivery in rows:
        if delivery.attempts or not _head_ready(delivery, now):
            break
        run.append(delivery)
    return run


def _run_commit(
    run: list[Delivery], owner: str, lease_until: datetime.datetime
) -> list[Outcome]:
    """Claim a fresh run as one group try and commit it at once; [] if it did not.

    A run that fails is given back as it was (never tried, no lease), and the turn
    goes on one by one, where a failure stops the partition in order. A worker that
    dies mid-run leaves group tries behind: those deliveries run alone afterwards,
    and the try is blamed on none of them (``process.death_count``).
    """
    now = timezone.now()
    pks = [delivery.pk for delivery in run]
    claimed = Delivery.objects.filter(
        _lease_free(now), pk__in=pks, attempts=0, status=Delivery.Status.PENDING
    ).update(attempts=1, group_tries=1, lease_owner=owner, leased_until=lease_until)
    for delivery in run:
        delivery.attempts, delivery.group_tries = 1, 1
        delivery.lease_owner, delivery.leased_until = owner, lease_until
    committed = group_commit(run, owner=owner) if claimed == len(run) else None
    if committed is None:
        _run_give_back(pks, owner)
        return []
    return committed


def _run_give_back(pks: list[int], owner: str) -> None:
    Delivery.objects.filter(
        pk__in=pks, lease_owner=owner, status=Delivery.Status.PENDING, group_tries=1
    ).update(
        attempts=F("attempts") - 1,
        group_tries=0,
        lease_owner="",
        leased_until=None,
    )


def _claim_head(head: Delivery, owner: str, lease_until: datetime.datetime) -> bool:
    """Count the attempt and lease the head, as the unordered claim does."""
    now = timezone.now()
    won = Delivery.objects.filter(
        _lease_free(now),
        pk=head.pk,
        attempts=head.attempts,
        status=Delivery.Status.PENDING,
    ).update(attempts=F("attempts") + 1, lease_owner=owner, leased_until=lease_until)
    if won != 1:
        return False
    head.attempts += 1
    head.lease_owner = owner
    head.leased_until = lease_until
    return True


def partition_loads(subscription: str) -> list[int]:
    """Return each partition's pending deliveries, in partition order."""
    spec = SUBSCRIPTIONS[subscription]
    counts = dict.fromkeys(range(spec.partitions), 0)
    pending = (
        Delivery.objects.filter(
            subscription=subscription,
            status=Delivery.Status.PENDING,
            partition__isnull=False,
        )
        .values("partition")
        .annotate(n=Count("id"))
    )
    for row in pending:
        counts[row["partition"]] = row["n"]
    return [counts[p] for p in sorted(counts)]

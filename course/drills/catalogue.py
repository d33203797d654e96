"""The drills: what each incident looks like, what to reach, and where it is taught.

Each drill names its incident module (``course.drills.incidents``), whose ``seed``
sets the incident up inside the drill's sandbox and whose ``check`` says whether the
learner's fix holds. The texts are shown on the drill's page; the permissions are
those of the operator account the drill creates in its sandbox (being staff opens
the admin, each action needs its own right, as on the real site).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from course.drills.incidents import (
    dead_letters,
    full_queue,
    hot_key,
    poison_partition,
    stuck_lease,
    trimmed_stream,
)
from course.drills.incidents.common import Verdict


@dataclass(frozen=True)
class Drill:
    slug: str
    title: str
    summary: str  # one line, for the list of drills
    symptom: tuple[str, ...]  # paragraphs: what the on-call operator sees
    goal: str
    where: tuple[tuple[str, str], ...]  # (admin path, what to look at there)
    debrief: tuple[str, ...]  # paragraphs, shown once the check passes
    lessons: tuple[str, ...]  # lesson slugs, in the order to reread them
    permissions: tuple[str, ...]
    incident: ModuleType

    @property
    def seed(self) -> Callable[[], dict[str, str]]:
        """Seed the incident; return facts of this sandbox to show the learner."""
        seed: Callable[[], dict[str, str]] = self.incident.seed
        return seed

    @property
    def check(self) -> Callable[[], Verdict]:
        check: Callable[[], Verdict] = self.incident.check
        return check


_MESSAGES_VIEW = (
    "messaging.view_outboxmessage",
    "messaging.view_delivery",
    "messaging.view_deadletter",
    "messaging.view_subscriptionstate",
)

DRILLS: tuple[Drill, ...] = (
    Drill(
        slug="dead-letter-cluster",
        title="Dead letters after a bad deploy",
        summary="A dozen notifications died in one cluster while a deploy was "
        "broken; two other letters will never apply.",
        symptom=(
            "The admin's home page counts open dead letters, all on the "
            "notification subscription. Members who borrowed a book during last "
            "night's deploy were never told so. The deploy was rolled back a "
            "while ago and new loans notify their members again.",
            "Two of the letters look different from the rest.",
        ),
        goal="Every member of the deploy window gets their notification, once. "
        "Letters that can never apply are archived with a reason, and no letter "
        "stays open.",
        where=(
            ("/admin/", "the messaging overview and the open dead letters"),
            (
                "/admin/messaging/deadletter/clusters/",
                "open letters grouped by error",
            ),
            ("/admin/messaging/deadletter/", "each letter, its body and its error"),
        ),
        debrief=(
            "A cluster is one cause: the letters of the deploy window failed alike "
            "because the handler was broken, not because of anything in their "
            "messages. Once the cause is gone, one redrive of the cluster sends "
            "them all back, and the dedup guard makes sure a letter redriven twice "
            "still writes one notification.",
            "The two letters naming a book that does not exist fail for a reason "
            "that lives in their bodies. Redriving them only spends five more "
            "attempts and brings them back. Discarding keeps them on record, with "
            "who and why, so that the open list means work to do.",
        ),
        lessons=("dead-letter-queues", "delivery-semantics", "message-queues"),
        permissions=(
            *_MESSAGES_VIEW,
            "messaging.redrive_deadletter",
            "messaging.discard_deadletter",
        ),
        incident=dead_letters,
    ),
    Drill(
        slug="poison-partition",
        title="A poison message stops a partition",
        summary="One change of the book ledger cannot apply, and its worker died "
        "holding the partition: everything behind it waits.",
        symptom=(
            "The book ledger is late for a few books only. The Partitions page "
            "shows one partition of book_ledger with changes pending behind its "
            "head while the other partitions are empty. Its lease names a worker "
            "that was killed a few minutes ago, and it still has most of its half "
            "hour to run.",
        ),
        goal="The partition flows again, every good change is in the ledger once "
        "and in order, and the message that cannot apply is dead-lettered and "
        "archived.",
        where=(
            ("/admin/messaging/partitionlease/", "partitions, their heads and leases"),
            ("/admin/messaging/delivery/", "the head's attempts and last error"),
            ("/admin/messaging/outboxmessage/", "the head's body"),
            ("/admin/messaging/deadletter/", "where a head that is given up goes"),
        ),
        debrief=(
            "An ordered partition waits for its head: skipping it would apply a "
            "later change of the same book first. That is what keeps the ledger in "
            "order, and also why one bad head, held by a dead worker's lease, "
            "stops every book that hashes to its partition.",
            "Freeing a partition is safe only when its holder is shown dead: a "
            "worker that is merely slow would see a second worker apply the same "
            "head beside it. The head's attempts stay counted, so the next worker "
            "isolates it as a letter whose worker died instead of trying it again.",
            "The letter's body has no book version; no retry will add one. "
            "Redriving it would fail again, and a redriven ledger change applied "
            "after newer ones would land out of order anyway. It goes to the "
            "archive.",
        ),
        lessons=(
            "ordering-and-partitioning",
            "poison-messages-and-retry",
            "dead-letter-queues",
        ),
        permissions=(
            *_MESSAGES_VIEW,
            "messaging.view_partitionlease",
            "messaging.redrive_deadletter",
            "messaging.discard_deadletter",
        ),
        incident=poison_partition,
    ),
    Drill(
        slug="hot-key-stampede",
        title="A stampede on a hot book",
        summary="Everyone reads one book's page; each expiry of its entry stalls "
        "the crowd.",
        symptom=(
            "One title is on every reading list this week. Cache metrics show the "
            "book namespace with waves of misses and single-flight waits, each "
            "one a crowd of readers who arrived when the book's entry had just "
            "expired: one of them went to the database and the rest waited for it.",
        ),
        goal="An expiry of that book's entry no longer stalls anyone: at the "
        "moment it happens, every reader is answered from the cache at once, "
        "with the book's current shelf count.",
        where=(
            ("/admin/cache-metrics/", "the book namespace: misses, waits, origin"),
            ("/admin/library/book/", "the books, and what can be done to them"),
        ),
        debrief=(
            "Single-flight already keeps an expiry to one trip to the database, "
            "but the crowd still waits for that trip. Stale-while-revalidate "
            "answers them with the page they had a moment ago while one refresh "
            "runs in the background, so an expiry costs nobody any time.",
            "The price is staleness, and here it is small: the key names the "
            "book's version, so a loan or an edit is a new key and shows at once. "
            "What may be old is only what the version does not cover. The checker "
            "made an expiry happen on purpose and counted who had to wait.",
        ),
        lessons=("hot-key-and-stampede-effect", "cache-strategies", "cache-metrics"),
        permissions=("library.view_book", "library.change_book"),
        incident=hot_key,
    ),
    Drill(
        slug="full-bounded-queue",
        title="A full queue sheds work",
        summary="A bounded queue is full and drops every new request; its "
        "producer keeps offering them.",
        symptom=(
            "Requests from the intake producer keep failing with 'dropped'. The "
            "producer offers each one again later, so nothing is lost yet, but "
            "nothing is done either. The queue in front of the workers reports "
            "all its places taken.",
        ),
        goal="The workers take jobs again, the bound has room, every request the "
        "producer made is admitted, and each one runs exactly once.",
        where=(
            ("/admin/bounded-queues/", "each bound, its rq queue and its workers"),
            ("/admin/rq/", "the queues dashboard: depths and workers"),
        ),
        debrief=(
            "A bound turns an overload into refusals at the door instead of an "
            "ever longer queue. It does not make anything faster: with no "
            "consumer taking jobs, any bound fills, however large.",
            "The workers were alive but suspended, which is easy to miss: their "
            "processes are there, their queues grow. Once they run again, the "
            "producer's retries are admitted as places free up, and each request "
            "runs once because the producer re-offers only what was refused.",
        ),
        lessons=("backpressure", "load-shedding", "worker-processes"),
        permissions=("django_rq.admin",),
        incident=full_queue,
    ),
    Drill(
        slug="stuck-lease",
        title="A scheduled task held by a dead process",
        summary="The daily overdue reminders were skipped: the task's lease "
        "names a process that is gone.",
        symptom=(
            "Members with overdue loans got no reminder today. The scheduled "
            "task overdue_notifications says its last slot was skipped because "
            "its lease was held, and the lease is still held.",
        ),
        goal="Today's reminders go out, one per overdue loan and none twice, and "
        "the task's lease no longer belongs to a dead process.",
        where=(
            (
                "/admin/jobs/scheduledtaskstate/",
                "each task's last outcome, next run and lease holder",
            ),
        ),
        debrief=(
            "The lease did its job: it kept the scheduled run from overlapping a "
            "run it could not see finish. A lease ends by itself, but only after "
            "its time, and a skipped slot is not made up: the scheduler moves on "
            "to the next one.",
            "Breaking a lease is safe only when its holder is shown dead; one "
            "that might still run would then overlap the next run. Running the "
            "slot again is safe because the task is idempotent per day: each "
            "reminder's id is made of its loan and day, so a second run writes "
            "nothing new.",
        ),
        lessons=("scheduled-tasks", "long-running-jobs", "worker-processes"),
        permissions=(
            "jobs.view_scheduledtaskstate",
            "jobs.run_scheduled_task",
        ),
        incident=stuck_lease,
    ),
    Drill(
        slug="trimmed-stream",
        title="A stream consumer cut by retention",
        summary="The stock projection stopped while the log went on; retention "
        "trimmed what it never read.",
        symptom=(
            "The stock projection shows old shelf counts for some books and "
            "nothing at all for others. Its consumer is in the trimmed state: its "
            "next message is older than what the log still keeps.",
        ),
        goal="The consumer runs and is caught up, no projection row disagrees "
        "with its book, and every book in the kept log has its row.",
        where=(
            (
                "/admin/messaging/streamconsumer/",
                "the consumer's offset, state and the log's start",
            ),
            ("/admin/messaging/outboxmessage/", "what the log keeps"),
        ),
        debrief=(
            "A consumer that reads a log by offset can only replay what the log "
            "still holds. Trimmed messages are gone, and the rows built from the "
            "messages before them may describe a past that later changes, now "
            "trimmed, had overwritten.",
            "Rewinding to the start of the kept log with a rebuild empties the "
            "projection and replays what is left, so every row comes from a "
            "message that is still there. Books whose last change was trimmed "
            "have no row until they change again; only a snapshot of the source "
            "could fill them, which is why retention must outlast a consumer's "
            "longest outage.",
        ),
        lessons=("streams-vs-queues", "delivery-semantics", "publish-subscribe"),
        permissions=(
            "messaging.view_outboxmessage",
            "messaging.view_streamconsumer",
            "messaging.change_streamconsumer",
        ),
        incident=trimmed_stream,
    ),
)

_BY_SLUG = {drill.slug: drill for drill in DRILLS}


def drill_get(slug: str) -> Drill | None:
    return _BY_SLUG.get(slug)

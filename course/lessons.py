"""The course's 25 lessons as data: slug, title, area and a summary in our own words.

Slugs are the last segment of each lesson's address on academia.sh; labs are keyed by
the same slug (``course/labs/registry.py`` checks that at import).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

COURSE_URL = "https://academia.sh/en/courses/asynchronous-processing"


class Area(StrEnum):
    CACHING = "Caching"
    MESSAGING = "Messaging"
    BACKGROUND_JOBS = "Background Jobs"
    REAL_TIME = "Real-Time Data"


@dataclass(frozen=True)
class Lesson:
    number: int
    slug: str
    title: str
    area: Area
    summary: str

    @property
    def url(self) -> str:
        return f"{COURSE_URL}/{self.slug}"


_C, _M, _B, _R = Area.CACHING, Area.MESSAGING, Area.BACKGROUND_JOBS, Area.REAL_TIME

_LESSONS: list[tuple[str, str, Area, str]] = [
    (
        "cache-layers",
        "Cache Layers",
        _C,
        "Counts how often a read path asks the database for an answer it already "
        "gave, then stacks client, edge and server caches in front of it and "
        "measures the share of traffic each one absorbs. Shared layers may only "
        "hold answers that are identical for every user.",
    ),
    (
        "cache-strategies",
        "Cache Strategies",
        _C,
        "Runs one workload through cache-aside, write-through and write-behind and "
        "compares origin reads, origin writes and hit counts. Also replays the "
        "interleaving in which cache-aside stores a value that is already outdated.",
    ),
    (
        "invalidation",
        "Invalidation",
        _C,
        "Compares expiring entries by age, dropping them when an outbox event "
        "arrives, and putting a version number into the key. Each approach trades "
        "origin load against stale answers, and versioned keys leave orphans behind.",
    ),
    (
        "cache-key-design",
        "Cache Key Design",
        _C,
        "Shows how naively glued keys collide and leak data between tenants, then "
        "derives keys from namespace, schema version, generation, tenant and "
        "canonically ordered criteria. Measures how key cardinality moves the hit "
        "ratio.",
    ),
    (
        "hot-key-and-stampede-effect",
        "Hot Key and Stampede Effect",
        _C,
        "When a popular entry expires, a crowd of concurrent requests rebuilds it at "
        "once. Single-flight locking, serving stale data while refreshing, jittered "
        "lifetimes and sharded copies each tame a different part of that storm.",
    ),
    (
        "http-caching",
        "HTTP Caching",
        _C,
        "Lets responses describe their own caching: ETag and Last-Modified turn a "
        "repeat download into an empty 304, and Cache-Control directives are chosen "
        "per resource according to who may keep a copy and for how long.",
    ),
    (
        "cache-metrics",
        "Cache Metrics",
        _C,
        "Turns a cache into numbers: hit ratio against capacity, what evictions "
        "reveal, per-namespace ratios that a single total hides, and why the byte "
        "hit ratio can tell a different story than the request hit ratio.",
    ),
    (
        "rationale-for-asynchronous-processing",
        "Rationale for Asynchronous Processing",
        _M,
        "Splits a request's work into what the answer truly needs and what can "
        "happen later, measures the latency and success gains, and shows why the "
        "deferred work must be handed off durably rather than kept in memory.",
    ),
    (
        "message-queues",
        "Message Queues",
        _M,
        "Builds a minimal queue with write, receive, acknowledge and a visibility "
        "timeout on a virtual clock. A message nobody acknowledged comes back after "
        "the timeout, competing consumers split the work, and depth tracks the gap "
        "between production and consumption.",
    ),
    (
        "publish-subscribe",
        "Publish\u2013Subscribe",  # the course writes it with an en dash
        _M,
        "Separates topics from subscriptions so one publish reaches every interested "
        "party, keeps a slow subscriber's backlog its own, counts copies a filter "
        "saves, and shows that a late subscriber never sees earlier messages.",
    ),
    (
        "streams-vs-queues",
        "Streams versus Queues",
        _M,
        "Contrasts deleting on consumption with an append-only log read through "
        "per-consumer offsets: storage cost, cheap replay on a stream, and what "
        "retention does to a reader that has fallen behind.",
    ),
    (
        "delivery-semantics",
        "Delivery Semantics",
        _M,
        "Whether a message is lost, repeated, or repeated harmlessly (deduplicated) "
        "follows from the order of effect and acknowledgement. The same crashing "
        "workload is counted for losses and repeats, including effects that live "
        "outside the database.",
    ),
    (
        "ordering-and-partitioning",
        "Ordering and Partitioning",
        _M,
        "Counts order inversions when competing consumers process one key's events, "
        "keeps per-key order by partitioning on the key at the price of global "
        "order, and shows a hot key overloading its partition.",
    ),
    (
        "dead-letter-queues",
        "Dead-Letter Queues",
        _M,
        "Messages that can never succeed waste attempts forever under blind retry. "
        "An attempt threshold moves them aside with enough context to redrive them "
        "later; the threshold value decides how many transient failures get caught "
        "by mistake.",
    ),
    (
        "poison-messages-and-retry",
        "Poison Messages and Retry",
        _M,
        "A message that crashes its consumer is only caught if attempts are counted "
        "at delivery. Compares immediate, fixed and exponential retry schedules by "
        "total wait and budget, and how jitter flattens a wave of retries.",
    ),
    (
        "worker-processes",
        "Worker Processes",
        _B,
        "Treats the job as its own unit of scale: a pool of workers, throughput as "
        "the pool grows, a supervisor that replaces crashed workers, and shutting "
        "down without abandoning work in flight.",
    ),
    (
        "scheduled-tasks",
        "Scheduled Tasks",
        _B,
        "Computes next run times for calendar rules, including months without the "
        "requested day and time-zone pitfalls, and uses a lease lock so a slow run "
        "never overlaps the next one.",
    ),
    (
        "long-running-jobs",
        "Long-Running Jobs",
        _B,
        "Breaks a job of many minutes into chunks, records progress durably, stops "
        "cooperatively when asked to cancel, and resumes from the last completed "
        "chunk instead of starting over.",
    ),
    (
        "backpressure",
        "Backpressure",
        _B,
        "When producers outpace consumers an unbounded queue turns into unbounded "
        "waiting. Simulates bounded buffers that block, drop new or drop old "
        "items, and propagates the full signal back to the producer.",
    ),
    (
        "load-shedding",
        "Load Shedding",
        _B,
        "Refuses excess work early with a concurrency limit and a short queue, "
        "compares latency for admitted and rejected requests, and shapes the "
        "rejection so clients back off instead of retrying in a storm.",
    ),
    (
        "polling-approaches",
        "Polling Approaches",
        _R,
        "Short polling pays for many empty answers; long polling holds a connection "
        "open until something changes. Both are measured against the same event, "
        "and a version number closes the gap between polls.",
    ),
    (
        "server-sent-events",
        "Server-Sent Events",
        _R,
        "Streams events down one long response: the line format, the headers a "
        "stream needs, resuming after a cut with the last event id, and heartbeat "
        "comments that keep intermediaries from closing an idle connection.",
    ),
    (
        "websocket-server",
        "WebSocket Server",
        _R,
        "Implements a WebSocket from first principles: the HTTP upgrade and accept "
        "key, framing and masking, ping and pong, the closing handshake, and why "
        "stateful connections complicate running several servers.",
    ),
    (
        "broadcast-and-channel-management",
        "Broadcast and Channel Management",
        _R,
        "With several server instances a message delivered locally misses clients "
        "connected elsewhere. A shared broadcast channel fixes that; the lesson "
        "measures fan-out cost and keeps track of who is subscribed.",
    ),
    (
        "streaming-responses",
        "Streaming Responses",
        _R,
        "Sends a response in pieces with chunked transfer encoding, measures time to "
        "first byte, faces the problem of reporting an error once headers are gone, "
        "and respects backpressure from a slow reader.",
    ),
]

LESSONS: tuple[Lesson, ...] = tuple(
    Lesson(number=i, slug=slug, title=title, area=area, summary=summary)
    for i, (slug, title, area, summary) in enumerate(_LESSONS, start=1)
)
_BY_SLUG = {lesson.slug: lesson for lesson in LESSONS}
assert len(_BY_SLUG) == len(LESSONS) == 25, "the course has 25 distinct lessons"


# What a learner can do after each area, in our own words (the course index shows it).
AREA_OUTCOMES: dict[Area, str] = {
    Area.CACHING: (
        "Put the right cache in front of a slow read, choose its keys, lifetimes and "
        "invalidation so nobody is served another tenant's data or a stale answer "
        "for long, survive a hot key expiring, and prove the gain with hit ratios."
    ),
    Area.MESSAGING: (
        "Take work out of the request path durably with an outbox, choose between a "
        "queue, a topic and a stream, keep per-key order, and make retries, "
        "duplicates and poison messages harmless."
    ),
    Area.BACKGROUND_JOBS: (
        "Run work on a supervised worker pool, schedule it without overlaps, split "
        "long jobs into resumable chunks, and keep a system responsive under more "
        "load than it can serve."
    ),
    Area.REAL_TIME: (
        "Push changes to open pages with polling, server-sent events or WebSockets, "
        "resume after a dropped connection without losing an event, and broadcast "
        "across several server instances."
    ),
}


def lesson_get(slug: str) -> Lesson | None:
    """Return the lesson with ``slug`` or None."""
    return _BY_SLUG.get(slug)


def lessons_by_area() -> list[tuple[Area, list[Lesson]]]:
    """Return the lessons grouped by area, in course order."""
    return [(area, [x for x in LESSONS if x.area == area]) for area in Area]

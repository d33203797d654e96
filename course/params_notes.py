"""What the parameter tables cannot say, per lab: written under its table in
``course/PARAMETERS.md`` (``course.params_page``).

Each note says what is still refused and why, and what runs in the model only (the
live part refuses it in one line). Keyed by lab slug; a slug the registry does not
have stops the generator, so a renamed lab takes its note along.
"""

from __future__ import annotations

from typing import Final

NOTES: Final[dict[str, str]] = {
    "cache-layers": (
        "Still refused: `users` 0 (every request of the chain stream is drawn from "
        "users 1..`users`). Live: `server_capacity` 0 runs in the model only (the "
        "live server cache is the application's Redis, which cannot be switched off "
        "for one tier)."
    ),
    "cache-strategies": (
        "Still refused: `hot_books` 0 (no book to read or write) and above 60 (the "
        "catalogue's size); `flush_every` 0 (write-behind flushes every N writes; 1 "
        "flushes at each)."
    ),
    "invalidation": (
        "Still refused: a `delays` value of 0 (the consumer wakes every N ticks; 1, "
        "every tick, is the shortest)."
    ),
    "hot-key-and-stampede-effect": (
        "`shard_requests` 0 gives `busiest_pct` null (the course's NaN). Still "
        "refused: `keys` 0 (the expiry table reports the busiest step of the loaded "
        "keys), `shards` 0 (a request needs a node), a `copies` value of 0 (a key "
        "split into no copy)."
    ),
    "cache-metrics": (
        "A capacity of 0 stores nothing: every read is a miss and an eviction."
    ),
    "message-queues": (
        "A consumer count of 0: nobody consumes, the depth grows by `production` each"
        " round. A utilisation of 100 or more runs: its `variability` row has no "
        "waits and says the queue is unstable. Still refused: `visibility` ≤ 0, "
        "`rounds` 0 (the depth run reports one depth per round), an `arrivals` other "
        "than `fixed` or `poisson`, a negative `service_cv`."
    ),
    "publish-subscribe": (
        "Still refused: `rounds` 0 (the slow-subscriber table has one row per round)."
    ),
    "delivery-semantics": (
        "A single message (`messages` 1) runs; `messages` 0 is an empty outbox (all "
        "counts 0). Live: `messages` 0 runs in the model only. Still refused: a crash"
        " id 0 (ids start at 1); ids above `messages` never crash, as in the course."
    ),
    "ordering-and-partitioning": (
        "Still refused: `books` 0, a worker or partition count of 0 (no one to apply "
        "the events). Live: an empty `workers` runs in the model only (the live part "
        "runs the partitioned measurements with the largest worker count)."
    ),
    "dead-letter-queues": (
        "A single message (`messages` 1) runs; `messages` 0 leaves every count at 0. "
        "Live: `messages` 0 runs in the model only. Still refused: `threshold` 0 and "
        "a `thresholds` value of 0 (a message is isolated after N ≥ 1 attempts)."
    ),
    "poison-messages-and-retry": (
        "A single consumer (`consumers` 1) runs. Still refused: `consumers` 0, "
        "`attempts` 0, `bucket_ms` 0 (the width of a counting slot), and `consumers` "
        "\N{MULTIPLICATION SIGN} `attempts` above 100,000."
    ),
    "worker-processes": (
        "A single worker (`workers` 1) and a single job (`jobs` 1) run; `jobs` 0 "
        "gives 0 slices (the live part answers it without starting a process). Still "
        "refused: a worker count of 0 (the jobs would never finish) and `job_ms` 0 "
        "(durations are counted in slices of one job); a utilisation of 100 or more "
        "(a pool is sized below full load; the queue would have no steady state), an "
        "`arrivals` other than `fixed` or `poisson`, a negative `service_cv`. Live: "
        "the `live_variability` table always measures 50, 70 and 85 % on two workers "
        "with jobs of 40 ms on average, whatever `utilisations` says (a short, "
        "bounded run)."
    ),
    "scheduled-tasks": (
        "Still refused: `runs` 0, and a `start` that is not an ISO date-time."
    ),
    "long-running-jobs": (
        "Still refused: `records` 0 (the resumed run's average divides by the record "
        "count) and `chunk` 0 (the loop would never advance)."
    ),
    "backpressure": (
        "`consume_per_s` 0 is a stopped consumer: nothing is delivered and the queue "
        "fills (every `variability` row says so, with no numbers). A utilisation of "
        "100 or more runs: the unbounded queue's cells stay empty, the tail-drop ones"
        " are filled. Live: `consume_per_s` 0 runs in the model only (a live job "
        "lasts 2000 / `consume_per_s` ms). Still refused: `produce_per_s` 0, "
        "`capacity` 0 (head drop displaces the oldest waiting job, and an empty queue"
        " has none), `window_ms` below 100, an `arrivals` other than `fixed` or "
        "`poisson`, a negative `service_cv`."
    ),
    "load-shedding": (
        "`requests` 0 gives empty tables, live included (no server is started). "
        "`max_queue` 0 sheds every request beyond the running ones. A utilisation of "
        "100 or more runs: the unbounded server's cells stay empty, the controlled "
        "server's are filled. Still refused: `max_concurrent` 0 (no job could ever "
        "start), `job_ms` 0, an `arrivals` other than `fixed` or `poisson`, a "
        "negative `service_cv`."
    ),
    "polling-approaches": (
        "Still refused: `hold_ms` 0 (a long poll is held for a while; a hold of 0 is "
        "short polling, the table's other row)."
    ),
    "broadcast-and-channel-management": (
        "Still refused: `instances` 1 — the experiment asks whether a broadcast "
        "reaches a subscriber on *another* instance."
    ),
    "streaming-responses": (
        "Still refused: `lines` \N{MULTIPLICATION SIGN} `line_ms` above 60 s."
    ),
}

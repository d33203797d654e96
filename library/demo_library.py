"""The demo library's rows, generated from the catalogue and name lists in ``data/``.

Nothing here touches the database: ``demo_library(today=…)`` returns unsaved rows with
their ids, and ``library.seed`` writes the missing ones. One seeded generator draws
everything in a fixed order, so the same day always gives the same library; the day
only anchors the loan dates, so a new installation has loans due this week rather
than two years ago.

The shape, in plain words:

- every work of ``catalogue.csv`` is held by one or more branches; a branch's ``holds``
  is the chance it holds a given work, so the central library carries most of the
  catalogue and the small branches a part of it. Each holding is one ``Book`` row (a
  book belongs to one branch) with its own number of copies, 1 to 6;
- members have a home branch, where they borrow most of the time, and an appetite:
  a few read a book a fortnight, many a handful a year, some never came back;
- a loan lasts a few days to a few weeks; some readers bring books back late, a few
  not at all. A loan still out is open, and overdue once it is older than the loan
  period. A book's ``on_shelf`` is its copies minus its open loans.

The labs do not read these rows for their numbers: each lab carries its own data set
(the Cache Layers library is ``course.labs.harness.dataset``), so this file may change.
"""

from __future__ import annotations

import csv
import datetime
import json
import random
import unicodedata
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass
from functools import cache
from itertools import accumulate
from pathlib import Path
from typing import TypedDict

from library.models import Book, Branch, Loan, Member
from library.services.notices import LOAN_PERIOD_DAYS

DATA_DIR = Path(__file__).resolve().parent / "data"
SEED = 1813  # any fixed number: it only has to stay the same between runs
MEMBERS = 240  # at least 200: the cache-metrics lab's live part reads 200 members
MAX_COPIES = 6
HISTORY_DAYS = 540  # how far back the loan history reaches
HOME_SHARE = 0.8  # loans a member takes at their home branch
NEVER_BACK_DAYS = 90  # a copy out longer than this has been written off, not lent


@dataclass(frozen=True)
class BranchPlan:
    id: int
    name: str
    city: str
    holds: float  # chance that the branch holds a given work of the catalogue
    copy_weights: tuple[int, ...]  # weights of 1, 2, … copies of a work it holds
    readers: int  # weight of the branch as a member's home branch


BRANCHES = (
    BranchPlan(1, "Central Library", "Ankara", 0.85, (2, 3, 3, 2, 1, 1), 30),
    BranchPlan(2, "Bahçelievler", "Ankara", 0.45, (4, 3, 2, 1), 15),
    BranchPlan(
        3,
        "Kad\u0131köy",  # dotless i, as in Turkish
        "Istanbul",
        0.65,
        (3, 3, 2, 2, 1),
        25,
    ),
    BranchPlan(4, "Konak", "Izmir", 0.40, (4, 3, 2, 1), 18),
    BranchPlan(5, "Bornova", "Izmir", 0.20, (5, 3, 1), 12),
)

# Loans per member over the history, and how often each appetite occurs.
APPETITES = ((0, 8), (3, 30), (10, 32), (25, 22), (60, 8))
# How a loan ends: back within the period, back late, or not back at all.
ON_TIME, LATE, NEVER = "on time", "late", "never"
ENDINGS = ((ON_TIME, 75), (LATE, 21), (NEVER, 4))


@dataclass(frozen=True)
class Work:
    title: str
    author: str
    year: int


class _NameGroup(TypedDict):
    name: str
    weight: int
    given: list[str]
    family: list[str]


@dataclass(frozen=True)
class DemoLibrary:
    branches: list[Branch]
    books: list[Book]
    members: list[Member]
    loans: list[Loan]


@cache
def catalogue() -> tuple[Work, ...]:
    """Return the works of ``data/catalogue.csv`` in file order."""
    with (DATA_DIR / "catalogue.csv").open(encoding="utf-8", newline="") as file:
        return tuple(
            Work(title=row["title"], author=row["author"], year=int(row["year"]))
            for row in csv.DictReader(file)
        )


@cache
def name_groups() -> tuple[_NameGroup, ...]:
    """Return the name groups of ``data/names.json``."""
    with (DATA_DIR / "names.json").open(encoding="utf-8") as file:
        groups: list[_NameGroup] = json.load(file)["groups"]
    return tuple(groups)


def email_local_part(given: str, family: str) -> str:
    """Return ``given.family`` in lower-case ASCII ("Ünal" gives "unal")."""
    # NFKD splits "ş" into "s" and a cedilla, but the Turkish dotless i has no
    # decomposition and would vanish: it becomes a plain i first.
    text = f"{given}.{family}".replace("\u0131", "i")
    ascii_ = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return "".join(c for c in ascii_.lower() if c.isalnum() or c == ".")


@dataclass
class _Holding:
    book_id: int
    work: Work
    branch: BranchPlan
    copies: int
    popularity: float


def _holdings(rng: random.Random) -> list[_Holding]:
    # Shuffled, so book ids read like an acquisition order rather than the file's.
    works = list(catalogue())
    rng.shuffle(works)
    holdings: list[_Holding] = []
    for work in works:
        # A long tail: a few works are asked for far more often than the rest.
        popularity = min(rng.paretovariate(1.3), 40.0)
        held = [plan for plan in BRANCHES if rng.random() < plan.holds]
        for plan in held or [BRANCHES[0]]:
            copies = rng.choices(
                range(1, len(plan.copy_weights) + 1), weights=plan.copy_weights
            )[0]
            holdings.append(_Holding(len(holdings) + 1, work, plan, copies, popularity))
    return holdings


def _members(
    rng: random.Random, today: datetime.date
) -> list[tuple[Member, BranchPlan, int]]:
    """Return each member with their home branch and how many loans they took."""
    groups = name_groups()
    taken: Counter[str] = Counter()
    members = []
    for n in range(1, MEMBERS + 1):
        group = rng.choices(groups, weights=[g["weight"] for g in groups])[0]
        given, family = rng.choice(group["given"]), rng.choice(group["family"])
        local = email_local_part(given, family)
        taken[local] += 1
        if taken[local] > 1:
            local = f"{local}{taken[local]}"
        email = f"{local}@example.test" if rng.random() < 0.9 else ""
        home = rng.choices(BRANCHES, weights=[b.readers for b in BRANCHES])[0]
        appetite = rng.choices(
            [a for a, _ in APPETITES], weights=[w for _, w in APPETITES]
        )[0]
        loans = max(0, round(appetite * rng.uniform(0.6, 1.4)))
        joined = today - datetime.timedelta(days=rng.randint(30, 12 * 365))
        if n == 1:
            # The reader account signs in as member 1: give it a history to show.
            loans, joined = 30, today - datetime.timedelta(days=3 * 365)
        member = Member(
            id=n,
            first_name=given,
            last_name=family,
            email=email,
            registered_at=joined,
        )
        members.append((member, home, loans))
    return members


def _loan_length(rng: random.Random) -> tuple[str, int]:
    ending = rng.choices([e for e, _ in ENDINGS], weights=[w for _, w in ENDINGS])[0]
    if ending == ON_TIME:
        return ending, rng.randint(2, LOAN_PERIOD_DAYS)
    if ending == LATE:
        return ending, rng.randint(LOAN_PERIOD_DAYS + 1, 3 * LOAN_PERIOD_DAYS)
    return ending, 0


def demo_library(*, today: datetime.date) -> DemoLibrary:
    """Return the demo library's rows, loans dated up to ``today``."""
    rng = random.Random(SEED)
    holdings = _holdings(rng)
    by_branch = {
        plan.id: [h for h in holdings if h.branch is plan] for plan in BRANCHES
    }
    # Cumulative weights, so each draw is a bisection rather than a scan.
    cumulative = {
        branch: list(accumulate(h.popularity for h in rows))
        for branch, rows in by_branch.items()
    }
    start = today - datetime.timedelta(days=HISTORY_DAYS)
    drafts: list[tuple[datetime.date, datetime.date | None, int, int]] = []
    members = _members(rng, today)
    for member, home, count in members:
        first_day = max(start, member.registered_at)
        span = (today - first_day).days
        out: set[int] = set()
        for _ in range(count):
            plan = home
            if rng.random() >= HOME_SHARE:
                plan = rng.choices(BRANCHES, weights=[b.readers for b in BRANCHES])[0]
            weights = cumulative[plan.id]
            pick = bisect_left(weights, rng.uniform(0, weights[-1]))
            holding = by_branch[plan.id][min(pick, len(weights) - 1)]
            pickup = first_day + datetime.timedelta(days=rng.randint(0, span))
            ending, days = _loan_length(rng)
            back: datetime.date | None = pickup + datetime.timedelta(days=days)
            if ending == NEVER and (today - pickup).days > NEVER_BACK_DAYS:
                # Long gone: the loan was closed when the copy was written off.
                ending = LATE
                back = pickup + datetime.timedelta(days=NEVER_BACK_DAYS)
            if ending == NEVER or (back is not None and back > today):
                if holding.book_id in out:
                    continue  # nobody borrows a second copy of what they have
                out.add(holding.book_id)
                back = None
            drafts.append((pickup, back, member.pk, holding.book_id))
    loans, open_per_book = _loans_within_copies(drafts, holdings)
    books = [
        Book(
            id=h.book_id,
            title=h.work.title,
            author=h.work.author,
            publication_year=h.work.year,
            branch_id=h.branch.id,
            on_shelf=h.copies - open_per_book[h.book_id],
        )
        for h in holdings
    ]
    return DemoLibrary(
        branches=[Branch(id=b.id, name=b.name, city=b.city) for b in BRANCHES],
        books=books,
        members=[member for member, _, _ in members],
        loans=loans,
    )


def _loans_within_copies(
    drafts: list[tuple[datetime.date, datetime.date | None, int, int]],
    holdings: list[_Holding],
) -> tuple[list[Loan], Counter[int]]:
    """Number the loans by pickup date, keeping open loans within each book's copies.

    A popular book gets copies up to ``MAX_COPIES`` for the loans out at once (as a
    branch buys more of what is asked for); an open loan beyond that is dropped.
    Mutates the holdings' ``copies``. Returns the loans and the open ones per book.
    """
    by_id = {h.book_id: h for h in holdings}
    open_per_book: Counter[int] = Counter()
    loans: list[Loan] = []
    # Open loans first, the longest out first: when a book's copies run out, the
    # loans out longest keep theirs and the newest are the ones dropped.
    for pickup, back, member_id, book_id in sorted(
        drafts, key=lambda d: (d[1] is not None, d[0])
    ):
        if back is None:
            if open_per_book[book_id] >= MAX_COPIES:
                continue
            open_per_book[book_id] += 1
        loans.append(
            Loan(
                book_id=book_id,
                member_id=member_id,
                pickup_date=pickup,
                return_date=back,
            )
        )
    loans.sort(key=lambda loan: (loan.pickup_date, loan.member_id, loan.book_id))
    for number, loan in enumerate(loans, start=1):
        loan.id = number
    for book_id, out in open_per_book.items():
        holding = by_id[book_id]
        holding.copies = max(holding.copies, out)
    return loans, open_per_book

"""The loan desk's searches: books, members and open loans from a few typed words.

Every word must appear in one of the searched columns ("eco rose" finds "The Name
of the Rose" by Umberto Eco); a number, with or without "#", also names a row by its
id (the member's card number). A "contains" search cannot use a B-tree index, so
each query is bounded instead: at most ``SEARCH_MAX_TERMS`` words of a text of at
most ``SEARCH_MAX_CHARS``, and a LIMIT of one row past what is shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from django.db.models import Case, Count, IntegerField, Q, QuerySet, Value, When

from library.models import Book, Loan, Member

SUGGESTIONS: Final = 8
SEARCH_MIN_CHARS: Final = 2
SEARCH_MAX_CHARS: Final = 100
SEARCH_MAX_TERMS: Final = 4
_RECORD_NUMBER: Final = re.compile(r"#?([0-9]{1,9})")

Row = TypeVar("Row", Book, Member, Loan)


def search_terms(text: str) -> list[str]:
    """Return the distinct words of ``text``, at most ``SEARCH_MAX_TERMS`` of them."""
    terms: list[str] = []
    for word in text.split():
        if word.casefold() not in (t.casefold() for t in terms):
            terms.append(word)
    return terms[:SEARCH_MAX_TERMS]


def record_number(text: str) -> tuple[int, bool] | None:
    """Return the id a text names and whether it was marked with "#"; or None."""
    match = _RECORD_NUMBER.fullmatch(text.strip())
    if match is None or int(match[1]) == 0:
        return None
    return int(match[1]), text.strip().startswith("#")


def searchable(text: str) -> bool:
    """Return whether ``text`` is worth a query: a record number or two characters."""
    return record_number(text) is not None or len(text.strip()) >= SEARCH_MIN_CHARS


def _words_match(terms: Sequence[str], columns: Sequence[str]) -> Q:
    condition = Q()
    for term in terms:
        either = Q()
        for column in columns:
            either |= Q(**{f"{column}__icontains": term})
        condition &= either
    return condition


def _desk_filter(text: str, columns: Sequence[str], number_column: str) -> Q | None:
    """Return the condition a desk search puts on its rows; None: nothing to look for.

    "#12" names id 12 only; a bare "12" names id 12 or any row whose words hold "12"
    (a title like "1984" stays findable by its name).
    """
    if len(text) > SEARCH_MAX_CHARS or not searchable(text):
        return None
    number = record_number(text)
    if number is not None and number[1]:
        return Q(**{number_column: number[0]})
    by_words = None
    if len(text.strip()) >= SEARCH_MIN_CHARS:
        by_words = _words_match(search_terms(text), columns)
    if number is None:
        return by_words
    by_number = Q(**{number_column: number[0]})
    return by_number if by_words is None else by_number | by_words


def _first_of(text: str, column: str, number_column: str) -> Case:
    # Rank: the named id first, then rows whose column starts with the first word.
    number = record_number(text)
    terms = search_terms(text)
    whens = []
    if number is not None:
        whens.append(When(**{number_column: number[0]}, then=Value(0)))
    if terms:
        whens.append(When(**{f"{column}__istartswith": terms[0]}, then=Value(1)))
    return Case(*whens, default=Value(2), output_field=IntegerField())


@dataclass(frozen=True)
class Found(Generic[Row]):
    """Up to ``limit`` rows of a desk search, and whether more matched."""

    rows: list[Row]
    more: bool


def _found(rows: QuerySet[Row], limit: int) -> Found[Row]:
    # One row past the limit tells whether there are more, in the same query.
    fetched = list(rows[: limit + 1])
    return Found(rows=fetched[:limit], more=len(fetched) > limit)


_BOOK_COLUMNS: Final = ("title", "author")
_MEMBER_COLUMNS: Final = ("first_name", "last_name", "email")
_LOAN_COLUMNS: Final = (
    "book__title",
    "book__author",
    "member__first_name",
    "member__last_name",
)


def book_search(*, text: str, limit: int = SUGGESTIONS) -> Found[Book]:
    """Return books whose title or author hold every word, with their branch."""
    condition = _desk_filter(text, _BOOK_COLUMNS, "pk")
    if condition is None:
        return Found(rows=[], more=False)
    books = (
        Book.objects.filter(condition)
        .select_related("branch")
        .annotate(rank=_first_of(text, "title", "pk"))
        .order_by("rank", "title", "branch_id", "id")
    )
    return _found(books, limit)


def member_search(*, text: str, limit: int = SUGGESTIONS) -> Found[Member]:
    """Return members named by every word (or by card number), with ``open_loans``."""
    condition = _desk_filter(text, _MEMBER_COLUMNS, "pk")
    if condition is None:
        return Found(rows=[], more=False)
    members = (
        Member.objects.filter(condition)
        .annotate(
            rank=_first_of(text, "last_name", "pk"),
            open_loans=Count("loans", filter=Q(loans__return_date__isnull=True)),
        )
        .order_by("rank", "last_name", "first_name", "id")
    )
    return _found(members, limit)


def open_loan_search(*, text: str, limit: int = SUGGESTIONS) -> Found[Loan]:
    """Return open loans whose book or member match every word, or a card's loans."""
    condition = _desk_filter(text, _LOAN_COLUMNS, "member_id")
    if condition is None:
        return Found(rows=[], more=False)
    loans = (
        Loan.objects.filter(condition, return_date__isnull=True)
        .select_related("book", "book__branch", "member")
        .order_by("pickup_date", "id")
    )
    return _found(loans, limit)


def book_label(book: Book) -> str:
    """Return how the desk names a book in its search field (branch loaded)."""
    return f"{book.title} — {book.author} ({book.branch.name})"


def member_label(member: Member) -> str:
    return f"{member.full_name} (card #{member.pk})"


def loan_label(loan: Loan) -> str:
    """Return how the desk names an open loan (book and member loaded)."""
    since = f"{loan.pickup_date:%d %b %Y}"
    return f"{loan.book.title} — {loan.member.full_name}, since {since}"


@dataclass(frozen=True)
class Pick(Generic[Row]):
    """What a desk field names: one id to act on, or the candidates to choose from."""

    chosen: int | None
    candidates: list[Row]
    more: bool


def _pick(
    *,
    text: str,
    picked_id: int | None,
    rows: QuerySet[Row],
    condition: Q | None,
    label: Callable[[Row], str],
    search: Callable[[str], Found[Row]],
) -> Pick[Row]:
    """Resolve a desk field from its text and the id a suggestion or radio picked.

    The picked id stands while the text still describes it: the text is empty, is
    the row's label (as a suggestion wrote it) or still matches the row (the text
    that produced a choice list). Otherwise the text was edited since, and it wins.
    An id with no text is passed on unchecked: the service answers for a missing row.
    """
    if picked_id is not None:
        if not text:
            return Pick(chosen=picked_id, candidates=[], more=False)
        row = rows.filter(pk=picked_id).first()
        if row is not None and label(row) == text:
            return Pick(chosen=picked_id, candidates=[], more=False)
        if condition is not None and rows.filter(condition, pk=picked_id).exists():
            return Pick(chosen=picked_id, candidates=[], more=False)
    found = search(text)
    if len(found.rows) == 1 and not found.more:
        return Pick(chosen=found.rows[0].pk, candidates=[], more=False)
    return Pick(chosen=None, candidates=found.rows, more=found.more)


def book_pick(*, text: str, picked_id: int | None = None) -> Pick[Book]:
    """Return the book the issue form's book field names, or the candidates."""
    return _pick(
        text=text,
        picked_id=picked_id,
        rows=Book.objects.select_related("branch"),
        condition=_desk_filter(text, _BOOK_COLUMNS, "pk"),
        label=book_label,
        search=lambda t: book_search(text=t),
    )


def member_pick(*, text: str, picked_id: int | None = None) -> Pick[Member]:
    """Return the member the issue form's member field names, or the candidates."""
    return _pick(
        text=text,
        picked_id=picked_id,
        rows=Member.objects.all(),
        condition=_desk_filter(text, _MEMBER_COLUMNS, "pk"),
        label=member_label,
        search=lambda t: member_search(text=t),
    )


def open_loan_pick(*, text: str, picked_id: int | None = None) -> Pick[Loan]:
    """Return the open loan the return desk's field names, or the candidates."""
    return _pick(
        text=text,
        picked_id=picked_id,
        rows=Loan.objects.filter(return_date__isnull=True).select_related(
            "book", "book__branch", "member"
        ),
        condition=_desk_filter(text, _LOAN_COLUMNS, "member_id"),
        label=loan_label,
        search=lambda t: open_loan_search(text=t),
    )

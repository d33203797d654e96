"""A member's own history: cache-aside under the member's generation."""

from __future__ import annotations

import datetime
from typing import Any

from library import selectors

# Tenants are looked up through their module (``specs.branch_tenant``), never bound
# at import, so a test that replaces them there reaches this code.
from library.cache.reads import specs
from library.cache.reads.rows import (
    Absent,
    canonical_page_number,
    iso_or_none,
    page_of_rows,
    parse_date,
)
from library.cache.reads.specs import HISTORY, HISTORY_JITTER_S, HISTORY_LIFETIME_S
from library.cache.store import cache_aside, generation_get
from library.models import Book, Branch, Loan, Member


def _history_origin(member_id: int, number: int) -> dict[str, Any]:
    history = selectors.member_history_page(member_id=member_id, page=number)
    if history is None:
        raise Absent
    m = history.member
    return {
        "member": {
            "id": m.pk,
            "first_name": m.first_name,
            "last_name": m.last_name,
            "email": m.email,
            "registered_at": iso_or_none(m.registered_at),
            "user_id": m.user_id,
        },
        "total": history.total,
        "open": history.open,
        "count": history.loans.paginator.count,
        "number": history.loans.number,
        "rows": [
            {
                "id": loan.pk,
                "pickup_date": iso_or_none(loan.pickup_date),
                "return_date": iso_or_none(loan.return_date),
                "book": {
                    "id": loan.book.pk,
                    "title": loan.book.title,
                    "author": loan.book.author,
                    "branch": {
                        "id": loan.book.branch.pk,
                        "name": loan.book.branch.name,
                        "city": loan.book.branch.city,
                    },
                },
            }
            for loan in history.loans.object_list
        ],
    }


def _loan(row: dict[str, Any], member: Member) -> Loan:
    book_row = row["book"]
    book = Book(
        id=book_row["id"],
        title=book_row["title"],
        author=book_row["author"],
        branch=Branch(**book_row["branch"]),
    )
    return Loan(
        id=row["id"],
        book=book,
        member=member,
        pickup_date=datetime.date.fromisoformat(row["pickup_date"]),
        return_date=parse_date(row["return_date"]),
    )


def member_history_page(
    *, member_id: int, page: selectors.PageNumber = 1
) -> selectors.MemberHistory | None:
    """Return one member's history page; the key names the member, always.

    The entry is only ever read under the member's own tenant; whether the caller
    may see it is the view's decision, taken on the returned ``member.user_id``.
    """
    tenant = specs.member_tenant(member_id)
    number = canonical_page_number(page)
    key = HISTORY.key(
        tenant=tenant,
        generation=generation_get(HISTORY.namespace, tenant),
        criteria={"member": member_id, "page": number},
    )
    try:
        value = cache_aside(
            key=key,
            namespace=HISTORY.namespace,
            produce=lambda: _history_origin(member_id, number),
            lifetime_s=HISTORY_LIFETIME_S,
            jitter_s=HISTORY_JITTER_S,
        )
    except Absent:
        return None
    fields = dict(value["member"])
    fields["registered_at"] = parse_date(fields["registered_at"])
    member = Member(**fields)
    rows = [_loan(row, member) for row in value["rows"]]
    return selectors.MemberHistory(
        member=member,
        loans=page_of_rows(
            rows, value["count"], value["number"], selectors.LOANS_PER_PAGE
        ),
        total=value["total"],
        open=value["open"],
    )

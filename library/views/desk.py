"""The loan desk: issue, find and return loans, and the suggestions that feed them.

The desk names books, members and open loans by search text, never by raw ids: the
forms resolve the text on the server (``library.forms.DeskSearchForm``), so they
work without JavaScript, and ``static/js/desk.js`` adds suggestions from the small
JSON endpoints below, each behind the desk right it serves. Domain refusals
(``LibraryError``) become form errors with the error's HTTP status, so a conflict
answers 409 and still shows the form. Every answer here is ``no-store``.

The issue and return forms carry an idempotency key (``library.forms.IdempotentForm``):
the same form sent again (a retry after a lost answer, a double click) is answered
with what the first one did, and lends or returns nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from django.contrib import messages
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from library import permissions, selectors
from library.errors import LibraryError
from library.forms import LoanFindForm, LoanIssueForm, LoanReturnForm, SuggestForm
from library.models import Book, Loan, Member
from library.permissions import permission_required, user_may
from library.services import Once, loan_issue_once, loan_return_once
from library.services import loan_issue as loan_issue_service
from library.services import loan_return as loan_return_service
from library.views import HttpResponseSeeOther


def _parse_id(raw: str | None) -> int | None:
    try:
        value = int(raw or "")
    except ValueError:
        return None
    # Beyond a database integer the lookup itself would fail: treat it as no id.
    return value if 0 < value < 2**31 else None


@never_cache
@require_http_methods(["GET", "POST"])
@permission_required(permissions.ISSUE_LOAN)
def loan_issue(request: HttpRequest) -> HttpResponse:
    """The desk's issue form: a book and a member named by search text or picked.

    Without JavaScript the texts are resolved here (``LoanIssueForm``): a unique
    match or a number selects, several matches come back as a choice list (200: a
    question, not an error), anything else is a form error (400).
    """
    status = 200
    if request.method == "POST":
        form = LoanIssueForm(request.POST)
        if form.is_valid():
            try:
                done = _issue(form.cleaned_data)
            except LibraryError as error:
                form.add_error(None, error.message)
                status = error.status
            else:
                loan = done.loan
                said = (
                    f"Loan #{loan.pk} issued: “{loan.book.title}” to "
                    f"{loan.member.full_name} (card #{loan.member_id})."
                )
                _tell(request, done, said)
                return HttpResponseSeeOther(reverse("book-detail", args=[loan.book_id]))
        else:
            status = 200 if form.only_ambiguous() else 400
        book_id = form.resolved_id("book")
        book = selectors.book_detail(book_id=book_id) if book_id else None
    else:
        book_id = _parse_id(request.GET.get("book"))
        book = selectors.book_detail(book_id=book_id) if book_id else None
        form = LoanIssueForm(
            initial={"book": selectors.book_label(book.book), "book_id": book_id}
            if book
            else None
        )
    return render(
        request,
        "library/loan_issue.html",
        {
            "form": form,
            "book": book.book if book else None,
            "book_choices": form.candidates.get("book", []),
            "member_choices": form.candidates.get("member", []),
        },
        status=status,
    )


def _issue(data: dict[str, Any]) -> Once:
    book_id, member_id = data["book_id"], data["member_id"]
    key = data.get("idempotency_key")
    if key is None:
        loan = loan_issue_service(book_id=book_id, member_id=member_id)
        return Once(loan, replayed=False)
    return loan_issue_once(key=key, book_id=book_id, member_id=member_id)


def _return(loan_id: int, data: dict[str, Any]) -> Once:
    day, key = data["return_date"], data.get("idempotency_key")
    if key is None:
        return Once(loan_return_service(loan_id=loan_id, return_date=day), False)
    return loan_return_once(key=key, loan_id=loan_id, return_date=day)


def _tell(request: HttpRequest, done: Once, said: str) -> None:
    """Say what the submission did; a repeat is told it changed nothing."""
    if done.replayed:
        messages.info(
            request,
            f"This form had already been sent; nothing was changed. {said}",
        )
    else:
        messages.success(request, said)


@never_cache
@require_GET
@permission_required(permissions.RETURN_LOAN)
def loan_find(request: HttpRequest) -> HttpResponse:
    """The return desk: find an open loan by book or member, then confirm it.

    A GET form, so it is a search and bookmarkable; a unique match (or a picked
    suggestion) goes straight to that loan's confirmation page.
    """
    status = 200
    form = LoanFindForm(request.GET or None)
    if form.is_bound:
        if form.is_valid():
            loan_id = form.cleaned_data["loan_id"]
            return HttpResponseRedirect(reverse("loan-return", args=[loan_id]))
        status = 200 if form.only_ambiguous() else 400
    return render(
        request,
        "library/loan_find.html",
        {
            "form": form,
            "choices": form.candidates.get("loan", []),
            "more": form.more.get("loan", False),
        },
        status=status,
    )


# --- Desk suggestions (JSON for static/js/desk.js) ------------------------------------


class BookHit(TypedDict):
    id: int
    title: str
    author: str
    branch: str
    on_shelf: int
    label: str


class MemberHit(TypedDict):
    id: int
    name: str
    card: str
    email: str
    open_loans: int
    label: str


class LoanHit(TypedDict):
    id: int
    book: str
    member: str
    card: str
    branch: str
    since: str
    label: str
    url: str


def _book_hit(book: Book) -> BookHit:
    return {
        "id": book.pk,
        "title": book.title,
        "author": book.author,
        "branch": book.branch.name,
        "on_shelf": book.on_shelf,
        "label": selectors.book_label(book),
    }


def _member_hit(member: Member) -> MemberHit:
    return {
        "id": member.pk,
        "name": member.full_name,
        "card": f"#{member.pk}",
        "email": member.email,
        "open_loans": int(getattr(member, "open_loans", 0)),
        "label": selectors.member_label(member),
    }


def _loan_hit(loan: Loan) -> LoanHit:
    return {
        "id": loan.pk,
        "book": loan.book.title,
        "member": loan.member.full_name,
        "card": f"#{loan.member_id}",
        "branch": loan.book.branch.name,
        "since": loan.pickup_date.isoformat(),
        "label": selectors.loan_label(loan),
        "url": reverse("loan-return", args=[loan.pk]),
    }


def _suggestions(
    request: HttpRequest,
    perm: str,
    search: Callable[..., selectors.Found[Any]],
    hit: Callable[[Any], BookHit | MemberHit | LoanHit],
) -> JsonResponse:
    """Answer one suggestion query: 403 without ``perm``, 400 for a bad query.

    A JSON client gets a JSON refusal, not the sign-in page a browser would.
    """
    if not user_may(request.user, perm):
        reason = (
            "you do not have the permission for this"
            if request.user.is_authenticated
            else "sign in first"
        )
        return JsonResponse({"error": reason}, status=403)
    form = SuggestForm(request.GET)
    if not form.is_valid():
        reasons = [str(message) for message in form.errors["q"]]
        return JsonResponse({"error": " ".join(reasons)}, status=400)
    text = form.cleaned_data["q"]
    found = search(text=text)
    results: Sequence[BookHit | MemberHit | LoanHit] = [hit(r) for r in found.rows]
    return JsonResponse({"query": text, "results": results, "more": found.more})


@never_cache
@require_GET
def desk_suggest_books(request: HttpRequest) -> HttpResponse:
    """Books for the issue form, each with its branch and copies on the shelf."""
    return _suggestions(
        request, permissions.ISSUE_LOAN, selectors.book_search, _book_hit
    )


@never_cache
@require_GET
def desk_suggest_members(request: HttpRequest) -> HttpResponse:
    """Members for the issue form, by name or card number, with their open loans."""
    return _suggestions(
        request, permissions.ISSUE_LOAN, selectors.member_search, _member_hit
    )


@never_cache
@require_GET
def desk_suggest_loans(request: HttpRequest) -> HttpResponse:
    """Open loans for the return desk, by book or member."""
    return _suggestions(
        request, permissions.RETURN_LOAN, selectors.open_loan_search, _loan_hit
    )


@never_cache
@require_http_methods(["GET", "POST"])
@permission_required(permissions.RETURN_LOAN)
def loan_return(request: HttpRequest, loan_id: int) -> HttpResponse:
    status = 200
    current = selectors.loan_get(loan_id=loan_id)
    if current is None and request.method == "GET":
        raise Http404("No such loan.")
    bounds = {
        "earliest": current.pickup_date if current else None,
        "latest": timezone.localdate(),
    }
    if request.method == "POST":
        form = LoanReturnForm(request.POST, **bounds)
        if form.is_valid():
            try:
                done = _return(loan_id, form.cleaned_data)
            except LibraryError as error:
                # A refused date belongs beside the date; other refusals (already
                # returned, no such loan) concern the whole form.
                field = "return_date" if error.code == "invalid" else None
                form.add_error(field, error.message)
                status = error.status
            else:
                loan = done.loan
                said = (
                    f"Loan #{loan.pk} returned: “{loan.book.title}” is back on "
                    f"the shelf ({loan.book.on_shelf} now)."
                )
                _tell(request, done, said)
                return HttpResponseSeeOther(reverse("book-detail", args=[loan.book_id]))
        else:
            status = 400
    else:
        form = LoanReturnForm(**bounds)
    return render(
        request,
        "library/loan_return.html",
        {"form": form, "loan": current, "loan_id": loan_id},
        status=status,
    )

"""Pages of the library: each view parses input, calls one selector or service and
renders the answer. Domain refusals (``LibraryError``) become form errors with the
error's HTTP status, so a conflict answers 409 and still shows the form.

Read pages go through the cached reads (``library.cache.reads``) and answer with a
strong ETag of the rendered body, a 304 when the client's copy is current, and the
Cache-Control of their resource kind (``library.cache.http``). An HTML page carries
the signed-in user's name and a CSRF token in its navigation, so only the anonymous
variant is ``public``: a signed-in user's copy is ``private`` with the same max-age.
Django's session middleware adds ``Vary: Cookie`` to these pages (they read the
user), so a shared cache keeps the anonymous copy apart from anyone with a session.
The lesson warns that ``Vary: Cookie`` splits a shared cache per visitor; here it
only splits visitors who carry a cookie, since visitors without one send no Cookie
header and share one copy, and the personal copies are ``private`` anyway, which is
the lesson's fix for per-person responses. Forms are ``no-store``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.template import loader
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_GET, require_http_methods

from library import permissions, selectors
from library.cache import http, reads
from library.errors import LibraryError
from library.forms import BookSearchForm, LoanIssueForm, LoanReturnForm
from library.permissions import permission_required
from library.services import loan_issue as loan_issue_service
from library.services import loan_return as loan_return_service

P = ParamSpec("P")
View = Callable[Concatenate[HttpRequest, P], HttpResponse]


class HttpResponseSeeOther(HttpResponseRedirect):
    # 303 tells the browser to follow with a GET: reloading the result page never
    # re-submits the form.
    status_code = 303


def staff_required(view: View[P]) -> View[P]:
    """Let staff through; send anonymous users to sign in and refuse anyone else.

    Unlike ``staff_member_required`` a signed-in reader gets a 403 page instead of
    the admin's login form, which would only ask them to sign in again.
    """

    @functools.wraps(view)
    def wrapper(
        request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs
    ) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("Staff only.")
        return view(request, *args, **kwargs)

    return wrapper


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    branches = list(selectors.branch_list_with_stock())
    totals = {
        "shelf": sum(b.shelf_total for b in branches),
        "books": sum(b.book_count for b in branches),
        "open_loans": sum(b.open_loans for b in branches),
    }
    return render(
        request, "library/home.html", {"branches": branches, "totals": totals}
    )


def _for_user(request: HttpRequest, cache_control: str) -> str:
    """Return the directives for this request's copy of a public HTML page."""
    if request.user.is_authenticated:
        return http.private_variant(cache_control)
    return cache_control


def _stock() -> str:
    return http.stock_directives(settings.CACHE_STOCK_FRESH_S)


@require_GET
def branch_detail(request: HttpRequest, branch_id: int) -> HttpResponse:
    detail = reads.branch_page(branch_id=branch_id)
    if detail is None:
        raise Http404("No such branch.")
    response = render(request, "library/branch_detail.html", {"detail": detail})
    return http.conditional(
        request, response, cache_control=_for_user(request, _stock())
    )


@require_GET
def branch_books(request: HttpRequest, branch_id: int) -> HttpResponse:
    form = BookSearchForm(request.GET)
    # An over-long query is not worth an error page: search with what is valid.
    query = form.cleaned_data["q"] if form.is_valid() else ""
    found = reads.branch_books_page(
        branch_id=branch_id, query=query, page=request.GET.get("page", 1)
    )
    if found is None:
        raise Http404("No such branch.")
    branch, page = found
    response = render(
        request,
        "library/branch_books.html",
        {"branch": branch, "form": form, "query": query, "page": page},
    )
    # The catalogue shows shelf counts: it is stock, and ages like stock.
    return http.conditional(
        request, response, cache_control=_for_user(request, _stock())
    )


@require_GET
def branch_stock(request: HttpRequest, branch_id: int) -> HttpResponse:
    """Every book of the branch with its shelf count, as JSON: the same for everyone."""
    stock = reads.branch_stock_list(branch_id=branch_id)
    if stock is None:
        return JsonResponse({"error": "no such branch"}, status=404)
    response = JsonResponse(stock, json_dumps_params={"separators": (",", ":")})
    return http.conditional(request, response, cache_control=_stock())


@require_GET
def book_detail(request: HttpRequest, book_id: int) -> HttpResponse:
    if request.user.is_staff:
        # Staff see the open loans with members' names: the origin, privately.
        detail: selectors.BookDetail | reads.CachedBook | None = selectors.book_detail(
            book_id=book_id, with_open_loans=True
        )
    else:
        detail = reads.book_detail(book_id=book_id)
    if detail is None:
        raise Http404("No such book.")
    response = render(request, "library/book_detail.html", {"detail": detail})
    if request.user.is_authenticated:
        # The body also depends on the user (navigation, loans), which updated_at
        # does not describe: only the ETag validates this copy.
        return http.conditional(
            request, response, cache_control=http.private_variant(http.BOOK)
        )
    return http.conditional(
        request,
        response,
        cache_control=http.BOOK,
        last_modified=detail.book.updated_at,
    )


@require_GET
@cache_control(private=True)
def member_detail(request: HttpRequest, member_id: int) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    history = reads.member_history_page(
        member_id=member_id, page=request.GET.get("page", 1)
    )
    if not request.user.is_staff:
        # One answer whether or not the member exists, so readers cannot probe ids.
        if history is None or history.member.user_id != request.user.pk:
            raise PermissionDenied("This loan history is private.")
    elif history is None:
        raise Http404("No such member.")
    response = render(request, "library/member_detail.html", {"history": history})
    return http.conditional(request, response, cache_control=http.HISTORY)


def _parse_id(raw: str | None) -> int | None:
    try:
        value = int(raw or "")
    except ValueError:
        return None
    return value if value > 0 else None


@never_cache
@require_http_methods(["GET", "POST"])
@permission_required(permissions.ISSUE_LOAN)
def loan_issue(request: HttpRequest) -> HttpResponse:
    status = 200
    if request.method == "POST":
        form = LoanIssueForm(request.POST)
        if form.is_valid():
            try:
                loan = loan_issue_service(
                    book_id=form.cleaned_data["book_id"],
                    member_id=form.cleaned_data["member_id"],
                )
            except LibraryError as error:
                form.add_error(None, error.message)
                status = error.status
            else:
                messages.success(
                    request,
                    f"Loan #{loan.pk} issued: book #{loan.book_id} "
                    f"to member #{loan.member_id}.",
                )
                return HttpResponseSeeOther(reverse("book-detail", args=[loan.book_id]))
        else:
            status = 400
        book_id = _parse_id(request.POST.get("book_id"))
    else:
        book_id = _parse_id(request.GET.get("book"))
        form = LoanIssueForm(initial={"book_id": book_id} if book_id else None)
    book = selectors.book_detail(book_id=book_id) if book_id else None
    return render(
        request,
        "library/loan_issue.html",
        {"form": form, "book": book.book if book else None},
        status=status,
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
                loan = loan_return_service(
                    loan_id=loan_id, return_date=form.cleaned_data["return_date"]
                )
            except LibraryError as error:
                # A refused date belongs beside the date; other refusals (already
                # returned, no such loan) concern the whole form.
                field = "return_date" if error.code == "invalid" else None
                form.add_error(field, error.message)
                status = error.status
            else:
                messages.success(
                    request,
                    f"Loan #{loan.pk} returned: “{loan.book.title}” is back on "
                    f"the shelf ({loan.book.on_shelf} now).",
                )
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


# --- Error pages (wired as handler400/403/404/500 in config/urls.py) ----------------


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "400.html", status=400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "403.html", status=403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    # No request context: context processors, the session or the database may be
    # what failed, so the template renders from nothing.
    return HttpResponse(loader.get_template("500.html").render(), status=500)

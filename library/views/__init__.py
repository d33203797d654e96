"""Pages of the library: each view parses input, calls one selector or service and
renders the answer. The loan desk's forms and suggestions are in ``desk``.

Read pages go through the cached reads (``library.cache.reads``) and answer with a
strong ETag of the rendered body, a 304 when the client's copy is current, and the
Cache-Control of their resource kind (``library.cache.http``). An HTML page carries
the signed-in user's name and a CSRF token in its navigation, so only the anonymous
variant is ``public``: a signed-in user's copy is ``private`` with the same max-age.
Django's session middleware adds ``Vary: Cookie`` to these pages (they read the
user), so a shared cache keeps the anonymous copy apart from anyone with a session.
The lesson warns that ``Vary: Cookie`` splits a shared cache per visitor. Here
visitors without a cookie send no Cookie header and share one copy, and signed-in
copies are ``private`` anyway; but a signed-out visitor who carries a cookie (a
``csrftoken`` from a form they opened, a session from a lab run) gets a public copy
that a shared cache keeps per cookie value. An edge in front of the site should
ignore the cookies these public pages never read, or the split costs its hit ratio.
"""

from __future__ import annotations

from django.conf import settings
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
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from library import selectors
from library.cache import http, pages, reads
from library.forms import BookSearchForm


class HttpResponseSeeOther(HttpResponseRedirect):
    # 303 tells the browser to follow with a GET: reloading the result page never
    # re-submits the form.
    status_code = 303


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    branches = reads.library_overview()
    totals = {
        "shelf": sum(b.shelf_total for b in branches),
        "books": sum(b.book_count for b in branches),
        "open_loans": sum(b.open_loans for b in branches),
    }
    response = render(
        request, "library/home.html", {"branches": branches, "totals": totals}
    )
    # Stock figures, aged like a branch's: the page tier keeps the anonymous copy.
    return http.conditional(
        request, response, cache_control=_for_user(request, _stock())
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
    # A number past the last page renders the last page: the page tier must not
    # keep that copy under the number asked for, or each number would add one.
    pages.mark_rendered_page(response, page.number)
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
    # The page tier stores this rendering only under the key of this version.
    pages.mark_rendered_version(response, reads.book_version_of(detail.book).token)
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


# --- Error pages (wired as handler400/403/404/500 in config/urls.py) ----------------


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "400.html", status=400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "403.html", status=403)


# What a rate-limited sign-up or sign-in (django-allauth) is told to wait.
RATE_LIMITED_RETRY_S = 60


def too_many_requests(request: HttpRequest) -> HttpResponse:
    """The page of a rate-limited request (allauth's sign-up and sign-in)."""
    response = render(
        request, "429.html", {"retry_s": RATE_LIMITED_RETRY_S}, status=429
    )
    response["Retry-After"] = str(RATE_LIMITED_RETRY_S)
    return response


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    # No request context: context processors, the session or the database may be
    # what failed, so the template renders from nothing.
    return HttpResponse(loader.get_template("500.html").render(), status=500)

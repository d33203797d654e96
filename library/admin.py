"""Admin for the library.

Shelf counts and loans have invariants the services hold (a loan takes a copy, a return
puts it back, every change bumps ``Book.version``), so the admin goes through them:

- Loans are not added, edited or deleted here. Issue on /loans/issue/ (``loan_issue``);
  return with the "Return selected loans" action (``loan_return``). On the change page
  every field is read-only.
- A book's shelf count is changed through ``stock_correct`` (a stock-take), and other
  edits save only the changed columns plus a version bump. Loans issued while the form
  was open are not undone (see ``BookAdminForm``).
- A book everyone reads at once can be marked hot (``library.cache.hot``): its page
  is then served stale while it is refreshed, so its expiry stalls nobody. Marking
  needs ``library.change_book``, like resetting the cache's counters.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone

from library.cache.hot import hot_books_mark, hot_books_unmark
from library.errors import LibraryError
from library.models import Book, Branch, Loan, Member
from library.permissions import RETURN_LOAN, user_may
from library.services import loan_return, stock_correct, version_announce_on_commit


@admin.register(Branch)
class BranchAdmin(admin.ModelAdmin[Branch]):
    list_display = ["id", "name", "city", "book_count", "shelf_total"]
    list_display_links = ["id", "name"]
    list_filter = ["city"]
    search_fields = ["name", "city"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Branch]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                book_count=Count("books"),
                shelf_total=Coalesce(Sum("books__on_shelf"), 0),
            )
        )

    @admin.display(description="titles", ordering="book_count")
    def book_count(self, branch: Any) -> int:
        return int(branch.book_count)

    @admin.display(description="copies on shelf", ordering="shelf_total")
    def shelf_total(self, branch: Any) -> int:
        return int(branch.shelf_total)


class BookAdminForm(forms.ModelForm[Book]):
    # The shelf count the form showed. Loans change on_shelf while the form is open;
    # only a count that differs from what staff saw is a stock correction, otherwise
    # saving a title would put back the copies lent in the meantime.
    on_shelf_seen = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Book
        fields = ["title", "author", "publication_year", "branch", "on_shelf"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["on_shelf_seen"].initial = self.instance.on_shelf


@admin.register(Book)
class BookAdmin(admin.ModelAdmin[Book]):
    form = BookAdminForm
    list_display = [
        "id",
        "title",
        "author",
        "publication_year",
        "branch",
        "on_shelf",
        "version",
        "updated_at",
    ]
    list_display_links = ["id", "title"]
    list_filter = ["branch"]
    search_fields = ["title", "author", "=id"]
    list_select_related = ["branch"]
    list_per_page = 50
    readonly_fields = ["version", "updated_at"]
    actions = ["mark_hot", "unmark_hot"]

    def has_cache_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("library.change_book")

    @admin.action(
        description="Serve the selected books' pages stale while refreshing (hot keys)",
        permissions=["cache"],
    )
    def mark_hot(self, request: HttpRequest, queryset: QuerySet[Book]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        added = hot_books_mark(ids)
        self.message_user(
            request,
            f"{len(ids)} book(s) marked hot ({added} newly): past its fresh hour a "
            "hot book's page is served to every reader at once while one refresh "
            "runs. Every server follows within seconds.",
            messages.SUCCESS,
        )

    @admin.action(
        description="Read the selected books' pages cache-aside again",
        permissions=["cache"],
    )
    def unmark_hot(self, request: HttpRequest, queryset: QuerySet[Book]) -> None:
        removed = hot_books_unmark(queryset.values_list("pk", flat=True))
        self.message_user(
            request, f"{removed} book(s) no longer marked hot.", messages.SUCCESS
        )

    def save_model(
        self, request: HttpRequest, obj: Book, form: forms.ModelForm[Book], change: bool
    ) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        # Save only the edited columns: a full save would write back the on_shelf read
        # when the form was opened and undo loans issued in the meantime.
        fields = [
            name
            for name in form.changed_data
            if name not in ("on_shelf", "on_shelf_seen")
        ]
        if fields:
            Book.objects.filter(pk=obj.pk).update(
                **{name: getattr(obj, name) for name in fields},
                version=F("version") + 1,
                updated_at=timezone.now(),
            )
            # No event announces an edit: the page tier's record is told here.
            version_announce_on_commit(Book.objects.get(pk=obj.pk))
        seen = form.cleaned_data.get("on_shelf_seen")
        if "on_shelf" in form.changed_data and obj.on_shelf != seen:
            stock_correct(book_id=obj.pk, on_shelf=obj.on_shelf)
        obj.refresh_from_db()


@admin.register(Member)
class MemberAdmin(admin.ModelAdmin[Member]):
    list_display = ["id", "last_name", "first_name", "email", "registered_at", "user"]
    list_display_links = ["id", "last_name"]
    list_filter = [("user", admin.EmptyFieldListFilter), "registered_at"]
    search_fields = ["first_name", "last_name", "email", "user__username", "=id"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    list_per_page = 50


@admin.register(Loan)
class LoanAdmin(admin.ModelAdmin[Loan]):
    list_display = [
        "id",
        "book",
        "member",
        "branch",
        "pickup_date",
        "return_date",
        "is_open",
    ]
    list_filter = [("return_date", admin.EmptyFieldListFilter), "book__branch"]
    search_fields = [
        "=id",
        "book__title",
        "member__first_name",
        "member__last_name",
        "member__email",
    ]
    list_select_related = ["book", "book__branch", "member"]
    date_hierarchy = "pickup_date"
    raw_id_fields = ["book", "member"]
    readonly_fields = ["book", "member", "pickup_date", "return_date"]
    actions = ["return_loans"]
    list_per_page = 50

    @admin.display(description="branch", ordering="book__branch")
    def branch(self, loan: Loan) -> str:
        return loan.book.branch.name

    @admin.display(description="open", boolean=True, ordering="return_date")
    def is_open(self, loan: Loan) -> bool:
        return loan.is_open

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Issuing must take a copy off the shelf: use the loan desk (loan_issue).
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: Loan | None = None
    ) -> bool:
        # Deleting an open loan would lose its copy from the shelf count.
        return False

    def has_return_loan_permission(self, request: HttpRequest) -> bool:
        # The desk's right, not the model's change permission: returning a loan is
        # the same act here as at /loans/return/.
        return user_may(request.user, RETURN_LOAN)

    @admin.action(description="Return selected loans", permissions=["return_loan"])
    def return_loans(self, request: HttpRequest, queryset: QuerySet[Loan]) -> None:
        returned, refused = 0, []
        for loan_id in queryset.values_list("id", flat=True):
            try:
                loan_return(loan_id=loan_id)
            except LibraryError as error:
                refused.append(error.message)
            else:
                returned += 1
        if returned:
            self.message_user(
                request, f"{returned} loan(s) returned.", messages.SUCCESS
            )
        for message in refused:
            self.message_user(request, message, messages.WARNING)

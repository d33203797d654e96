"""The library's domain: branches, their books, members and loans.

Writes go through ``library.services``; nothing here carries behaviour beyond
representation, so the invariants live in one place.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse


class Branch(models.Model):
    name = models.CharField(max_length=100)
    city = models.CharField(max_length=100)
    # Bumped with every shelf change of the branch's books, in the same transaction:
    # live pages use it to notice a missed update.
    stock_version = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "branches"

    def __str__(self) -> str:
        return f"{self.name} ({self.city})"

    def get_absolute_url(self) -> str:
        return reverse("branch-detail", args=[self.pk])


class Book(models.Model):
    title = models.CharField(max_length=200)
    author = models.CharField(max_length=200)
    publication_year = models.PositiveSmallIntegerField(null=True, blank=True)
    branch = models.ForeignKey(Branch, on_delete=models.PROTECT, related_name="books")
    # Copies standing on the shelf now: a loan takes one, a return puts one back.
    on_shelf = models.PositiveIntegerField(default=0)
    # Bumped in the same transaction as every change, so caches can put it in their key.
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["branch", "title"], name="book_branch_title"),
            models.Index(fields=["author"], name="book_author"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(on_shelf__gte=0), name="book_on_shelf_not_negative"
            )
        ]
        # Named in library.permissions; checked by the live shelf socket.
        permissions = [("correct_stock", "Can correct a shelf count")]

    def __str__(self) -> str:
        return f"{self.title} — {self.author}"

    def get_absolute_url(self) -> str:
        return reverse("book-detail", args=[self.pk])


class Member(models.Model):
    first_name = models.CharField(max_length=100)
    last_name = models.CharField(max_length=100)
    email = models.EmailField(blank=True)
    registered_at = models.DateField()
    # A member may sign in to read their own loan history; staff see every member.
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="member",
    )

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.first_name} {self.last_name}"

    def get_absolute_url(self) -> str:
        return reverse("member-detail", args=[self.pk])

    @property
    def full_name(self) -> str:
        return f"{self.first_name} {self.last_name}"


class Loan(models.Model):
    book = models.ForeignKey(Book, on_delete=models.PROTECT, related_name="loans")
    member = models.ForeignKey(Member, on_delete=models.PROTECT, related_name="loans")
    pickup_date = models.DateField()
    return_date = models.DateField(null=True, blank=True)
    # The idempotency keys of the desk forms that issued and returned the loan
    # (library.services.loans): a form sent again finds its loan here instead of
    # lending or returning a second time. Unique, so two copies of one submission
    # racing each other cannot both commit; NULL (any number of them) for loans
    # made without a form.
    issue_key = models.CharField(
        max_length=64, unique=True, null=True, blank=True, editable=False
    )
    return_key = models.CharField(
        max_length=64, unique=True, null=True, blank=True, editable=False
    )

    class Meta:
        ordering = ["-pickup_date", "-id"]
        indexes = [
            models.Index(fields=["member", "pickup_date"], name="loan_member_pickup"),
            # Open loans of a book: used when counting what is out and on returns.
            models.Index(
                fields=["book"],
                condition=models.Q(return_date__isnull=True),
                name="loan_open_by_book",
            ),
        ]
        # Named in library.permissions; the desk's rights, apart from the admin's.
        permissions = [
            ("issue_loan", "Can issue a loan at the desk"),
            ("return_loan", "Can take a loan back at the desk"),
        ]

    def __str__(self) -> str:
        return f"Loan #{self.pk}: {self.book_id} to member {self.member_id}"

    @property
    def is_open(self) -> bool:
        return self.return_date is None


class Notification(models.Model):
    """A message to a member, written by the ``notification`` subscription."""

    member = models.ForeignKey(
        Member, on_delete=models.CASCADE, related_name="notifications"
    )
    loan = models.ForeignKey(Loan, on_delete=models.SET_NULL, null=True, blank=True)
    kind = models.CharField(max_length=40)
    text = models.CharField(max_length=300)
    # The outbox message it answers; unique as a second fence behind the dedup guard.
    source_message_id = models.BigIntegerField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"to {self.member_id}: {self.text}"


class BranchStock(models.Model):
    """Per-branch shelf totals, maintained by the ``stock_summary`` subscription."""

    branch = models.OneToOneField(Branch, on_delete=models.CASCADE, primary_key=True)
    on_shelf_total = models.PositiveIntegerField(default=0)
    titles = models.PositiveIntegerField(default=0)
    # The newest outbox offset this summary reflects.
    last_message_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "branch stock summary"
        verbose_name_plural = "branch stock summaries"

    def __str__(self) -> str:
        return f"{self.branch_id}: {self.on_shelf_total} on shelf"


class StockProjection(models.Model):
    """Each book's shelf count as the outbox log tells it: the stream's projection.

    Built only from message bodies by the ``stock_projection`` stream consumer, so it
    can be dropped and rebuilt by replaying the log; it must then equal the books.
    """

    book_id = models.BigIntegerField(primary_key=True)
    branch_id = models.BigIntegerField(db_index=True)
    on_shelf = models.IntegerField()
    book_version = models.PositiveIntegerField()
    offset = models.BigIntegerField()  # the message that set these values

    class Meta:
        ordering = ["book_id"]

    def __str__(self) -> str:
        return f"book {self.book_id}: {self.on_shelf} (v{self.book_version})"


class BookLedger(models.Model):
    """Every change of a book in the order the ``book_ledger`` subscription saw it.

    ``in_order`` is False when an entry arrived after one with a higher book version:
    the in-key inversion that partitioning by book id exists to prevent.
    """

    book_id = models.BigIntegerField()
    message_id = models.BigIntegerField(unique=True)
    book_version = models.PositiveIntegerField()
    kind = models.CharField(max_length=40)
    in_order = models.BooleanField(default=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["book_id", "id"], name="ledger_book")]

    def __str__(self) -> str:
        return f"book {self.book_id} v{self.book_version} ({self.kind})"

"""Desk links follow the named permissions, not ``is_staff``.

A staff account without ``library.issue_loan`` would only meet a 403 behind an
"Issue a loan" button; the pages leave out what the account may not do.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from library import views
from library.models import Book, Member
from library.permissions import CORRECT_STOCK, ISSUE_LOAN, RETURN_LOAN, permission_get
from library.services import loan_issue
from tests.people import DESK_PASSWORD

pytestmark = pytest.mark.django_db


def staff(*perms: str) -> Client:
    user = get_user_model().objects.create_user(
        "clerk", password=DESK_PASSWORD, is_staff=True
    )
    user.user_permissions.add(*(permission_get(perm) for perm in perms))
    client = Client()
    client.force_login(user)
    return client


def pages(book: Book, member: Member) -> dict[str, str]:
    loan_issue(book_id=book.pk, member_id=member.pk)
    return {
        "home": reverse("home"),
        "book": reverse("book-detail", args=[book.pk]),
        "member": reverse("member-detail", args=[member.pk]),
    }


def test_staff_without_desk_permissions_see_no_desk_links(book, member):
    client = staff()
    issue, find = reverse("loan-issue"), reverse("loan-find")
    for name, url in pages(book, member).items():
        body = client.get(url).content.decode()
        assert f'href="{issue}' not in body, name
        assert f'href="{find}' not in body, name
        assert "/return/" not in body, name


def test_issue_permission_shows_the_issue_links_only(book, member):
    client = staff(ISSUE_LOAN)
    urls = pages(book, member)
    issue = reverse("loan-issue")
    for name in ("home", "book", "member"):
        assert f'href="{issue}' in client.get(urls[name]).content.decode(), name
    assert "/return/" not in client.get(urls["member"]).content.decode()
    assert "/return/" not in client.get(urls["book"]).content.decode()


def test_return_permission_shows_the_return_links(book, member):
    client = staff(RETURN_LOAN)
    urls = pages(book, member)
    assert "/return/" in client.get(urls["member"]).content.decode()
    assert "/return/" in client.get(urls["book"]).content.decode()
    home = client.get(urls["home"]).content.decode()
    assert f'href="{reverse("loan-find")}"' in home
    assert f'href="{reverse("loan-issue")}' not in home


def test_live_shelf_offers_corrections_only_with_the_permission(branch):
    url = reverse("branch-live", args=[branch.pk])
    without = staff().get(url).content.decode()
    assert 'data-staff="false"' in without
    assert "Correct the count" not in without
    get_user_model().objects.all().delete()
    allowed = staff(CORRECT_STOCK).get(url).content.decode()
    assert 'data-staff="true"' in allowed
    assert "Correct the count" in allowed


def test_the_unused_staff_guard_is_gone():
    # Every desk view is guarded by a named permission (library.permissions).
    assert not hasattr(views, "staff_required")

"""The issue form in a real browser: type part of a title, pick by keyboard, issue.

A real daphne serves the page, the suggestion endpoints and the static script; the
test drives headless Chromium with the keyboard only, as a desk clerk would.
"""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth import get_user_model

from config.processes import free_port, start_daphne, stop
from library.models import Book, Branch, Loan, Member
from library.permissions import ISSUE_LOAN, RETURN_LOAN, permission_get
from library.services import loan_issue
from tests.browser import needs_chromium

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.processes,
    needs_chromium,
]
PASSWORD = "correct-horse-battery"


@pytest.fixture
def desk_site(transactional_db, redis_client):
    central = Branch.objects.create(name="Central", city="Ankara")
    north = Branch.objects.create(name="North", city="Izmir")
    books = {
        "central": Book.objects.create(
            title="The Name of the Rose", author="Eco", branch=central, on_shelf=2
        ),
        "north": Book.objects.create(
            title="The Name of the Rose", author="Eco", branch=north, on_shelf=4
        ),
        "other": Book.objects.create(
            title="Roseanna", author="Sjöwall", branch=central, on_shelf=1
        ),
    }
    member = Member.objects.create(
        first_name="Ada", last_name="Lovelace", registered_at=datetime.date(2024, 1, 1)
    )
    clerk = get_user_model().objects.create_user("desk", password=PASSWORD)
    clerk.user_permissions.add(permission_get(ISSUE_LOAN), permission_get(RETURN_LOAN))
    port = free_port()
    server = start_daphne(port)
    try:
        yield f"http://127.0.0.1:{port}", books, member
    finally:
        stop(server)


def sign_in(page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=login]", "desk")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.card button")
    page.wait_for_url(f"{base}/")


def active_option(page, field: str) -> str:
    """The text of the option the combobox points at with aria-activedescendant."""
    active = page.get_attribute(f"#id_{field}", "aria-activedescendant")
    assert active, "no active option"
    return page.inner_text(f"#{active}")


def test_pick_a_book_and_a_member_by_keyboard_and_issue(
    desk_site, browser, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM reads between steps
    base, books, member = desk_site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, base)
    page.goto(f"{base}/loans/issue/")

    book = page.locator("#id_book")
    assert book.get_attribute("role") == "combobox"
    assert book.get_attribute("aria-expanded") == "false"
    book.press_sequentially("name of the ro", delay=20)
    page.wait_for_selector("#id_book-listbox [role=option] >> nth=1")
    assert book.get_attribute("aria-expanded") == "true"
    assert page.locator("#id_book-listbox [role=option]").count() == 2
    options = page.inner_text("#id_book-listbox")
    assert "Central" in options
    assert "North" in options
    assert "4 on shelf" in options

    book.press("ArrowDown")
    book.press("ArrowDown")
    chosen = active_option(page, "book")
    assert "North" in chosen
    book.press("ArrowUp")
    book.press("ArrowDown")
    book.press("Enter")  # picks; it must not submit the form
    assert book.get_attribute("aria-expanded") == "false"
    assert page.input_value("input[name=book_id]") == str(books["north"].pk)
    assert page.input_value("#id_book") == "The Name of the Rose — Eco (North)"
    assert page.url == f"{base}/loans/issue/"

    person = page.locator("#id_member")
    person.press_sequentially("lovel", delay=20)
    page.wait_for_selector("#id_member-listbox [role=option]")
    person.press("Escape")  # closes without picking
    assert person.get_attribute("aria-expanded") == "false"
    assert page.input_value("input[name=member_id]") == ""
    person.press("ArrowDown")  # reopens on the same suggestions
    assert person.get_attribute("aria-expanded") == "true"
    assert "Ada Lovelace" in active_option(page, "member")
    person.press("Enter")
    assert page.input_value("input[name=member_id]") == str(member.pk)

    page.click("text=Issue loan")
    page.wait_for_url(f"{base}/books/{books['north'].pk}/")
    loan = Loan.objects.get()
    assert (loan.book_id, loan.member_id) == (books["north"].pk, member.pk)
    assert errors == []


def test_editing_the_text_after_a_pick_forgets_the_picked_id(
    desk_site, browser, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    base, books, _ = desk_site
    page = browser.new_page(viewport={"width": 390, "height": 844})
    sign_in(page, base)
    page.goto(f"{base}/loans/issue/?book={books['central'].pk}")
    assert page.input_value("input[name=book_id]") == str(books["central"].pk)
    book = page.locator("#id_book")
    book.fill("")
    book.press_sequentially("roseann", delay=20)
    assert page.input_value("input[name=book_id]") == ""
    page.wait_for_selector("#id_book-listbox [role=option]")
    page.fill("#id_member", "Lovelace")
    page.click("text=Issue loan")  # no pick: the server resolves both texts
    page.wait_for_url(f"{base}/books/{books['other'].pk}/")
    assert Loan.objects.get().book_id == books["other"].pk


def test_return_desk_finds_the_loan_by_member_name(desk_site, browser, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    base, books, member = desk_site
    loan = loan_issue(book_id=books["other"].pk, member_id=member.pk)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, base)
    page.goto(f"{base}/loans/return/")
    field = page.locator("#id_loan")
    field.press_sequentially("ada", delay=20)
    page.wait_for_selector("#id_loan-listbox [role=option]")
    field.press("ArrowDown")
    assert "Roseanna" in active_option(page, "loan")
    field.press("Enter")
    assert page.input_value("input[name=loan_id]") == str(loan.pk)
    page.click("text=Find the loan")
    page.wait_for_url(f"{base}/loans/{loan.pk}/return/")

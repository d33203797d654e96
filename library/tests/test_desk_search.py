"""The loan desk finds books, members and open loans by name, not by raw ids.

The suggestion endpoints answer JSON to the desk's own permissions; the forms accept
search text and resolve it on the server, so they work without JavaScript: a unique
match or a number selects, several matches become a choice list, none is an error.
"""

from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from library import selectors
from library.models import Book, Branch, Loan, Member
from library.permissions import ISSUE_LOAN, RETURN_LOAN, permission_get
from library.services import loan_issue
from tests.people import DESK_PASSWORD

pytestmark = pytest.mark.django_db

BOOKS = reverse("desk-suggest-books")
MEMBERS = reverse("desk-suggest-members")
LOANS = reverse("desk-suggest-loans")


def clerk(*perms: str) -> Client:
    """A signed-in staff account holding only ``perms``."""
    user = get_user_model().objects.create_user(
        f"clerk{len(perms)}{'-'.join(perms)}", password=DESK_PASSWORD, is_staff=True
    )
    user.user_permissions.add(*(permission_get(perm) for perm in perms))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def desk() -> Client:
    return clerk(ISSUE_LOAN, RETURN_LOAN)


@pytest.fixture
def shelves(branch: Branch) -> dict[str, Book]:
    north = Branch.objects.create(name="North", city="Izmir")
    return {
        "rose": Book.objects.create(
            title="The Name of the Rose",
            author="Umberto Eco",
            branch=branch,
            on_shelf=2,
        ),
        "rose_north": Book.objects.create(
            title="The Name of the Rose", author="Umberto Eco", branch=north, on_shelf=0
        ),
        "foucault": Book.objects.create(
            title="Foucault's Pendulum", author="Umberto Eco", branch=branch, on_shelf=1
        ),
        "dune": Book.objects.create(
            title="Dune", author="Frank Herbert", branch=north, on_shelf=3
        ),
    }


# --- The suggestion endpoints ------------------------------------------------------


def test_book_suggestions_show_branch_and_copies_on_shelf(desk, shelves):
    answer = desk.get(BOOKS, {"q": "rose"})

    assert answer.status_code == 200
    assert "no-store" in answer["Cache-Control"]
    results = answer.json()["results"]
    assert {(r["id"], r["branch"], r["on_shelf"]) for r in results} == {
        (shelves["rose"].pk, "Central", 2),
        (shelves["rose_north"].pk, "North", 0),
    }
    first = results[0]
    assert first["title"] == "The Name of the Rose"
    assert first["author"] == "Umberto Eco"
    assert first["label"] == selectors.book_label(Book.objects.get(pk=first["id"]))


def test_every_word_must_match_title_or_author(desk, shelves):
    results = desk.get(BOOKS, {"q": "eco pendulum"}).json()["results"]
    assert [r["id"] for r in results] == [shelves["foucault"].pk]


def test_a_number_names_the_book_by_its_id(desk, shelves):
    dune = shelves["dune"]
    results = desk.get(BOOKS, {"q": f"#{dune.pk}"}).json()["results"]
    assert [r["id"] for r in results] == [dune.pk]


def test_suggestions_are_capped_and_say_there_are_more(desk, branch):
    Book.objects.bulk_create(
        Book(title=f"Atlas volume {n}", author="Mapper", branch=branch)
        for n in range(selectors.SUGGESTIONS + 5)
    )
    with CaptureQueriesContext(connection) as queries:
        answer = desk.get(BOOKS, {"q": "atlas"}).json()

    assert len(answer["results"]) == selectors.SUGGESTIONS
    assert answer["more"] is True
    searches = [q["sql"] for q in queries if "library_book" in q["sql"]]
    assert len(searches) == 1
    assert re.search(rf"LIMIT {selectors.SUGGESTIONS + 1}\b", searches[0])


def test_member_suggestions_find_names_and_card_numbers(desk, member, other_member):
    by_name = desk.get(MEMBERS, {"q": "love"}).json()["results"]
    assert [(r["id"], r["name"]) for r in by_name] == [(member.pk, "Ada Lovelace")]
    assert by_name[0]["card"] == f"#{member.pk}"
    by_card = desk.get(MEMBERS, {"q": f"#{other_member.pk}"}).json()["results"]
    assert [r["id"] for r in by_card] == [other_member.pk]


def test_member_suggestions_count_open_loans(desk, member, book):
    loan_issue(book_id=book.pk, member_id=member.pk)
    (found,) = desk.get(MEMBERS, {"q": "ada"}).json()["results"]
    assert found["open_loans"] == 1


def test_a_one_letter_query_suggests_nothing_without_querying(desk, shelves):
    with CaptureQueriesContext(connection) as queries:
        answer = desk.get(BOOKS, {"q": "r"})
    assert answer.status_code == 200
    assert answer.json()["results"] == []
    assert not [q for q in queries if "library_book" in q["sql"]]


@pytest.mark.parametrize("url", [BOOKS, MEMBERS, LOANS])
def test_an_over_long_query_is_a_clear_400(desk, url):
    answer = desk.get(url, {"q": "x" * 101})
    assert answer.status_code == 400
    assert "at most 100" in answer.json()["error"]


@pytest.mark.parametrize("url", [BOOKS, MEMBERS])
def test_suggestions_need_the_issue_permission(url, shelves, member):
    assert Client().get(url, {"q": "rose"}).status_code == 403
    assert clerk().get(url, {"q": "rose"}).status_code == 403
    assert clerk(RETURN_LOAN).get(url, {"q": "rose"}).status_code == 403
    assert clerk(ISSUE_LOAN).get(url, {"q": "rose"}).status_code == 200


def test_open_loan_suggestions_need_the_return_permission(book, member):
    loan_issue(book_id=book.pk, member_id=member.pk)
    assert clerk(ISSUE_LOAN).get(LOANS, {"q": "rose"}).status_code == 403
    answer = clerk(RETURN_LOAN).get(LOANS, {"q": "rose"})
    assert answer.status_code == 200
    (found,) = answer.json()["results"]
    assert found["url"] == reverse("loan-return", args=[Loan.objects.get().pk])
    assert (found["book"], found["member"]) == ("The Name of the Rose", "Ada Lovelace")


def test_open_loan_suggestions_skip_returned_loans(desk, book, member, other_member):
    from library.services import loan_return

    returned = loan_issue(book_id=book.pk, member_id=member.pk)
    loan_return(loan_id=returned.pk)
    still_out = loan_issue(book_id=book.pk, member_id=other_member.pk)
    results = desk.get(LOANS, {"q": "rose"}).json()["results"]
    assert [r["id"] for r in results] == [still_out.pk]


# --- The issue form without JavaScript -----------------------------------------------


def test_issue_form_has_search_fields_not_raw_id_inputs(desk):
    body = desk.get(reverse("loan-issue")).content.decode()
    assert 'name="book"' in body
    assert 'name="member"' in body
    assert re.search(r'<input type="hidden" name="book_id"', body)
    assert 'type="number"' not in body
    assert "js/desk.js" in body
    assert "<script>" not in body.split("<main", 1)[1]  # no inline script


def test_unique_search_texts_issue_the_loan(desk, shelves, member):
    response = desk.post(
        reverse("loan-issue"), {"book": "pendulum", "member": "lovelace"}
    )
    assert response.status_code == 303
    loan = Loan.objects.get()
    assert (loan.book_id, loan.member_id) == (shelves["foucault"].pk, member.pk)


def test_a_card_number_selects_the_member(desk, shelves, member):
    response = desk.post(reverse("loan-issue"), {"book": "dune", "member": member.pk})
    assert response.status_code == 303
    assert Loan.objects.get().member_id == member.pk


def test_several_matches_show_a_choice_list_then_the_choice_issues(
    desk, shelves, member
):
    url = reverse("loan-issue")
    first = desk.post(url, {"book": "rose", "member": "ada"})

    assert first.status_code == 200
    assert not Loan.objects.exists()
    body = first.content.decode()
    rose, north = shelves["rose"], shelves["rose_north"]
    for book in (rose, north):
        assert f'name="book_id" value="{book.pk}"' in body
    assert "Central" in body
    assert "North" in body
    assert "2 on shelf" in body

    # The browser sends the text again with the radio that was picked.
    second = desk.post(url, {"book": "rose", "book_id": rose.pk, "member": "ada"})
    assert second.status_code == 303
    assert Loan.objects.get().book_id == rose.pk


def test_a_picked_id_is_dropped_when_the_text_names_another_book(desk, shelves, member):
    # The id the page had picked for "rose" must not win over what was typed since.
    response = desk.post(
        reverse("loan-issue"),
        {"book": "dune", "book_id": shelves["rose"].pk, "member": "ada"},
    )
    assert response.status_code == 303
    assert Loan.objects.get().book_id == shelves["dune"].pk


def test_the_label_a_suggestion_wrote_keeps_its_id(desk, shelves, member):
    rose = shelves["rose"]
    label = selectors.book_label(Book.objects.select_related("branch").get(pk=rose.pk))
    response = desk.post(
        reverse("loan-issue"),
        {
            "book": label,
            "book_id": rose.pk,
            "member": selectors.member_label(member),
            "member_id": member.pk,
        },
    )
    assert response.status_code == 303
    assert Loan.objects.get().book_id == rose.pk


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"book": "zzz-nothing", "member": "ada"}, "book", "No book matches"),
        ({"book": "dune", "member": "nobody-here"}, "member", "No member matches"),
        ({"book": "d", "member": "ada"}, "book", "at least 2"),
        ({"book": "", "member": "ada"}, "book", "Name the book"),
        ({"book": "dune", "book_id": "x", "member": "ada"}, "book", "not valid"),
        ({"book": "dune", "book_id": "-3", "member": "ada"}, "book", "not valid"),
        ({"book": "dune" * 40, "member": "ada"}, "book", "at most 100"),
    ],
)
def test_bad_input_is_a_form_error_beside_its_field(
    desk, shelves, member, data, field, message
):
    response = desk.post(reverse("loan-issue"), data)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert message in " ".join(errors[field])
    assert not Loan.objects.exists()


def test_prefilled_book_shows_its_label_in_the_search_field(desk, shelves):
    rose = shelves["rose"]
    response = desk.get(reverse("loan-issue"), {"book": rose.pk})
    form = response.context["form"]
    assert form["book"].value() == "The Name of the Rose — Umberto Eco (Central)"
    assert form["book_id"].value() == rose.pk


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "99999999999999999999"])
def test_a_junk_prefill_is_ignored_not_a_500(desk, raw):
    assert desk.get(reverse("loan-issue"), {"book": raw}).status_code == 200


# --- The return desk ---------------------------------------------------------------


def test_return_finder_without_javascript_goes_to_the_unique_loan(desk, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    response = desk.get(reverse("loan-find"), {"loan": "lovelace"})
    assert response.status_code == 302
    assert response["Location"] == reverse("loan-return", args=[loan.pk])


def test_return_finder_lists_several_open_loans(desk, book, member, other_member):
    loans = [
        loan_issue(book_id=book.pk, member_id=person.pk)
        for person in (member, other_member)
    ]
    response = desk.get(reverse("loan-find"), {"loan": "rose"})
    assert response.status_code == 200
    body = response.content.decode()
    for loan in loans:
        assert reverse("loan-return", args=[loan.pk]) in body


def test_return_finder_by_card_number(desk, book, member, other_member):
    mine = loan_issue(book_id=book.pk, member_id=member.pk)
    loan_issue(book_id=book.pk, member_id=other_member.pk)
    response = desk.get(reverse("loan-find"), {"loan": f"#{member.pk}"})
    assert response["Location"] == reverse("loan-return", args=[mine.pk])


def test_return_finder_picked_id_goes_straight_to_the_loan(desk, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    response = desk.get(reverse("loan-find"), {"loan": "", "loan_id": loan.pk})
    assert response["Location"] == reverse("loan-return", args=[loan.pk])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"loan": "nothing-like-this"}, "No open loan matches"),
        ({"loan": "x" * 101}, "at most 100"),
        ({"loan": "", "loan_id": "junk"}, "not valid"),
    ],
)
def test_return_finder_bad_input_is_a_form_error(desk, book, member, query, message):
    loan_issue(book_id=book.pk, member_id=member.pk)
    response = desk.get(reverse("loan-find"), query)
    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors["loan"])


def test_return_finder_first_visit_is_an_empty_form(desk):
    response = desk.get(reverse("loan-find"))
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert not response.context["form"].errors


def test_return_finder_needs_the_return_permission(book, member):
    url = reverse("loan-find")
    assert clerk(ISSUE_LOAN).get(url).status_code == 403
    assert clerk(RETURN_LOAN).get(url).status_code == 200


def test_member_search_handles_names_across_both_fields(desk, member):
    Member.objects.create(
        first_name="Ada",
        last_name="Byron",
        registered_at=datetime.date(2024, 1, 1),
    )
    results = desk.get(MEMBERS, {"q": "ada love"}).json()["results"]
    assert [r["id"] for r in results] == [member.pk]

"""The streamed loan report needs ``jobs.run_report``, as the report pages do.

Being staff opens the admin and nothing more (``library.permissions``); the CSV holds
every loan of a month with members' ids, so it asks for the same right as starting
and downloading a report in ``library.report.views``.
"""

from __future__ import annotations

import datetime

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from library.models import Book, Branch, Loan, Member
from library.permissions import ISSUE_LOAN, RUN_REPORT, permission_get

pytestmark = [pytest.mark.django_db(transaction=True)]
URL = "/realtime/reports/loans.csv"
PASSWORD = "correct-horse-battery"


@pytest.fixture
def one_loan(redis_client) -> None:
    branch = Branch.objects.create(name="Central", city="Ankara")
    book = Book.objects.create(title="Dune", author="H", branch=branch)
    member = Member.objects.create(
        first_name="A", last_name="B", registered_at=datetime.date(2024, 1, 1)
    )
    Loan.objects.create(book=book, member=member, pickup_date=datetime.date(2026, 1, 5))


def account(username: str, *perms: str, staff: bool = True) -> None:
    user = get_user_model().objects.create_user(
        username, password=PASSWORD, is_staff=staff
    )
    user.user_permissions.add(*(permission_get(perm) for perm in perms))


async def signed_in(username: str) -> AsyncClient:
    client = AsyncClient()
    assert await client.alogin(username=username, password=PASSWORD)
    return client


async def test_staff_without_the_report_permission_is_refused(one_loan):
    await sync_to_async(account)("desk", ISSUE_LOAN)
    response = await (await signed_in("desk")).get(URL, {"month": "2026-01"})
    assert response.status_code == 403


async def test_the_report_permission_opens_the_report_without_staff(one_loan):
    await sync_to_async(account)("analyst", RUN_REPORT, staff=False)
    response = await (await signed_in("analyst")).get(
        URL, {"month": "2026-01", "form": "buffered"}
    )
    assert response.status_code == 200
    assert response.content.decode().splitlines()[-1] == "# complete: 1 rows"

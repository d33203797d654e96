"""Learner accounts: sign up, verify, sign in, carry a visitor's session over, see
one's progress, and delete it all; rate limits on sign-up and sign-in."""

from __future__ import annotations

import re
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client, override_settings

from course.labs.registry import lab_get
from course.models import AccountDeletion, LabRun, LessonProgress
from course.services.labqueue import Requester, lab_run_request
from jobs.models import JobStatus
from library.models import Member

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-pass-phrase-1"
JSON = {"accept": "application/json"}


def sign_up(client: Client, name: str = "ada", email: str = "ada@example.org"):
    return client.post(
        "/accounts/signup/",
        {
            "username": name,
            "email": email,
            "password1": PASSWORD,
            "password2": PASSWORD,
        },
    )


def confirm_link() -> str:
    assert mail.outbox, "no mail was sent"
    found = re.search(r"(/accounts/confirm-email/[^/\s]+/)", str(mail.outbox[-1].body))
    assert found, mail.outbox[-1].body
    return found.group(1)


def sign_in(client: Client, login: str = "ada", password: str = PASSWORD):
    return client.post("/accounts/login/", {"login": login, "password": password})


def test_sign_up_verify_and_sign_in(redis_client):
    client = Client()
    answer = sign_up(client)
    assert answer.status_code == 302
    assert answer["Location"] == "/accounts/confirm-email/"
    user = get_user_model().objects.get(username="ada")
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["ada@example.org"]
    # Not verified yet: signing in only sends the verification again.
    elsewhere = Client()
    sign_in(elsewhere)
    assert "_auth_user_id" not in elsewhere.session
    link = confirm_link()
    assert elsewhere.get(link).status_code == 200  # asks to confirm (a POST)
    assert elsewhere.post(link).status_code == 302
    assert EmailAddress.objects.get(user=user).verified
    signed_in = Client()
    assert sign_in(signed_in).status_code == 302
    assert int(signed_in.session["_auth_user_id"]) == user.pk
    page = signed_in.get("/account/").content.decode()
    assert "Your progress across the course" in page
    assert "ada@example.org" in page


def test_an_account_an_operator_made_signs_in_without_a_verification(redis_client):
    get_user_model().objects.create_user("desk", password=PASSWORD)
    client = Client()
    assert sign_in(client, "desk").status_code == 302
    assert "_auth_user_id" in client.session
    assert not mail.outbox


def test_a_visitors_runs_and_progress_carry_over_into_their_new_account(redis_client):
    client = Client()
    run = client.post("/course/cache-layers/run", {}, headers=JSON).json()
    client.post("/course/cache-layers/progress", {"event": "read"})
    client.post("/course/cache-layers/progress", {"event": "answer", "question": "1"})
    page = client.get("/course/cache-layers/").content.decode()
    assert "kept in this browser" in page
    assert "1 of" in page
    assert LabRun.objects.get().visitor.startswith("anon:")

    sign_up(client)
    user = get_user_model().objects.get(username="ada")
    record = LabRun.objects.get()
    assert record.visitor == f"user:{user.pk}"
    assert JobStatus.objects.get(pk=run["job"]).created_by == user
    progress = LessonProgress.objects.get(user=user, slug="cache-layers")
    assert progress.read_at is not None
    assert progress.answered == [1]
    assert progress.lab_runs == 1
    assert "course_progress" not in client.session


def test_signing_in_from_a_session_adopts_it_too(redis_client):
    user = get_user_model().objects.create_user("bea", password=PASSWORD)
    client = Client()
    client.post("/course/invalidation/progress", {"event": "read"})
    sign_in(client, "bea")
    assert LessonProgress.objects.get(user=user, slug="invalidation").read_at


@override_settings(ACCOUNT_RATE_LIMITS={"signup": "2/m/ip"})
def test_sign_up_is_rate_limited_per_address(redis_client):
    for n in range(2):
        assert sign_up(Client(), f"u{n}", f"u{n}@example.org").status_code == 302
    refused = sign_up(Client(), "u9", "u9@example.org")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "60"
    assert "Too many tries" in refused.content.decode()
    assert not get_user_model().objects.filter(username="u9").exists()


def test_failed_sign_ins_are_rate_limited_per_account(redis_client):
    get_user_model().objects.create_user("cy", password=PASSWORD)
    client = Client()
    for _ in range(5):
        assert sign_in(client, "cy", "wrong-password").status_code == 200
    # allauth refuses on the form itself, naming the reason; even the right
    # password waits until the window has passed.
    refused = sign_in(client, "cy").content.decode()
    assert "Too many failed login attempts" in refused
    assert "_auth_user_id" not in client.session
    other = Client()
    assert sign_in(other, "cy").status_code == 200  # another address, same account
    assert "_auth_user_id" not in other.session


def test_password_reset_mails_a_link(redis_client):
    get_user_model().objects.create_user("dee", "dee@example.org", PASSWORD)
    answer = Client().post("/accounts/password/reset/", {"email": "dee@example.org"})
    assert answer.status_code == 302
    assert "/accounts/password/reset/key/" in mail.outbox[-1].body


def test_the_account_page_needs_a_signed_in_learner(client):
    answer = client.get("/account/")
    assert answer.status_code == 302
    assert answer["Location"].startswith("/accounts/login/?next=/account/")


# --- deleting one's account ---------------------------------------------------------


def learner_with_history() -> tuple[Any, Client]:
    user = get_user_model().objects.create_user("eve", "eve@example.org", PASSWORD)
    EmailAddress.objects.create(user=user, email="eve@example.org", verified=True)
    client = Client()
    client.force_login(user)
    client.post("/course/cache-layers/run", {"prediction": "12"}, headers=JSON)
    client.post("/course/cache-layers/progress", {"event": "read"})
    return user, client


def test_deleting_an_account_removes_runs_predictions_and_progress(redis_client):
    user, client = learner_with_history()
    member = Member.objects.create(
        first_name="Eve", last_name="E", registered_at="2026-01-01", user=user
    )
    assert (
        client.post(
            "/account/delete/", {"password": "nope", "confirm": "on"}
        ).status_code
        == 400
    )
    assert client.post("/account/delete/", {"password": PASSWORD}).status_code == 400
    answer = client.post("/account/delete/", {"password": PASSWORD, "confirm": "on"})
    assert answer.status_code == 302
    assert not get_user_model().objects.filter(username="eve").exists()
    assert not LabRun.objects.exists()
    assert not JobStatus.objects.exists()
    assert not LessonProgress.objects.exists()
    assert not EmailAddress.objects.exists()
    member.refresh_from_db()
    assert member.user is None  # the library keeps its member and loan history
    audit = AccountDeletion.objects.get()
    assert (audit.lab_runs, audit.predictions, audit.progress_rows) == (1, 1, 1)
    assert audit.member_unlinked
    # The audit names nobody.
    fields = {f.name for f in AccountDeletion._meta.get_fields()}
    assert not fields & {"user", "username", "email", "user_id"}
    assert "_auth_user_id" not in client.session


def test_a_run_others_joined_survives_its_owners_deletion_without_its_owner(
    redis_client,
):
    user, client = learner_with_history()
    lab = lab_get("cache-layers")
    leader = LabRun.objects.get(visitor=f"user:{user.pk}").job
    joined = lab_run_request(
        lab=lab, params={}, requester=Requester(visitor="user:77", client="")
    )
    assert joined.leader is not None
    assert joined.leader.pk == leader.pk
    client.post("/account/delete/", {"password": PASSWORD, "confirm": "on"})
    kept = JobStatus.objects.get(pk=leader.pk)
    assert "_prediction" not in kept.params
    assert kept.created_by is None
    assert LabRun.objects.get(pk=leader.pk).visitor == "deleted"
    assert JobStatus.objects.filter(pk=joined.job.pk).exists()  # type: ignore[union-attr]


def test_an_operator_account_is_not_deleted_from_its_own_page(redis_client):
    staff = get_user_model().objects.create_user("op", password=PASSWORD, is_staff=True)
    client = Client()
    client.force_login(staff)
    answer = client.post("/account/delete/", {"password": PASSWORD, "confirm": "on"})
    assert answer.status_code == 409
    assert get_user_model().objects.filter(username="op").exists()


def test_the_delete_form_needs_the_csrf_token(redis_client):
    user, _ = learner_with_history()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert (
        strict.post(
            "/account/delete/", {"password": PASSWORD, "confirm": "on"}
        ).status_code
        == 403
    )
    assert get_user_model().objects.filter(username="eve").exists()

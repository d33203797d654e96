"""Dead-letter actions in the admin: confirmed redrives (one letter or a whole
cluster), discard as an archive with who and why, the warning on letters that killed
their worker, and the permissions each action asks for."""

import dataclasses
import html
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from library.services import loan_issue
from messaging import registry
from messaging.errors import DeadLetterError
from messaging.models import DeadLetter, Delivery
from messaging.selectors import dead_letter_clusters, dead_letter_open_count
from messaging.services import (
    dead_letter_discard,
    dead_letter_redrive,
    dead_letter_redrive_cluster,
    deliveries_claim,
    messaging_drain,
    relay_pending,
)
from messaging.tests.conftest import make_due
from messaging.tests.test_admin import letters, operator, operator_client  # noqa: F401
from messaging.tests.test_selectors import NOTIFY_ERROR, NOTIFY_SIGNATURE

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:messaging_deadletter_changelist"
CLUSTERS = "admin:messaging_deadletter_clusters"
REDRIVE_CLUSTER = "admin:messaging_deadletter_redrive_cluster"
DIED = "the worker died during 1 earlier attempt(s)"
DIED_SIGNATURE = "the worker died during <n> earlier attempt(s)"
WARNING = "killed a worker in 1 attempt(s)"


@pytest.fixture
def killers(letters, monkeypatch):  # noqa: F811
    """Beside the six plain letters, two whose first attempt killed its worker.

    A worker claims the new loan's deliveries alone and dies (never finishes them); once
    the leases are over, the next worker finds attempts used up with a death behind
    them and dead-letters them without running them again.
    """
    notification = registry.SUBSCRIPTIONS["notification"]
    monkeypatch.setitem(
        registry.SUBSCRIPTIONS,
        "notification",
        dataclasses.replace(notification, max_attempts=2),
    )
    loan_issue(book_id=2, member_id=3)
    relay_pending()
    # One delivery per claim: a claim of several takes them as a group try, whose
    # death is not held against any of them (no telling which one killed it).
    doomed = []
    while claimed := deliveries_claim(owner="doomed-worker", limit=1):
        doomed += claimed
    make_due(*doomed)
    messaging_drain(owner="next-worker", budget_seconds=30)
    found = list(DeadLetter.objects.filter(last_error=DIED).order_by("subscription"))
    assert [x.subscription for x in found] == ["broadcast", "notification"]
    return found


def broadcast_row(clusters_page):
    """Return (cluster, list url, redrive url) of the broadcast cluster's row."""
    return next(
        row
        for row in clusters_page.context["rows"]
        if row[0].subscription == "broadcast"
    )


def staff(django_user_model, name, *codenames):
    user = django_user_model.objects.create_user(name, is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="messaging").filter(
            codename__in=codenames
        )
    )
    client = Client()
    client.force_login(user)
    return user, client


def hidden_inputs(response):
    """Return the confirmation form's hidden fields, as its POST would send them."""
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="([^"]+)" value="([^"]*)">', response.text
    ):
        fields.setdefault(name, []).append(html.unescape(value))
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def page_messages(response):
    return [str(m) for m in response.context["messages"]]


def open_letters():
    return DeadLetter.objects.filter(
        redriven_at__isnull=True, discarded_at__isnull=True
    )


# --- The warning ----------------------------------------------------------------------


def test_letter_that_killed_its_worker_is_flagged_in_the_change_list(
    operator_client,  # noqa: F811
    killers,
):
    response = operator_client.get(reverse(CHANGELIST))
    rows = {x.pk: x.worker_deaths for x in response.context["cl"].result_list}
    assert {pk for pk, deaths in rows.items() if deaths} == {x.pk for x in killers}
    assert {rows[x.pk] for x in killers} == {1}
    assert response.text.count(WARNING) == 2
    page = operator_client.get(
        reverse("admin:messaging_deadletter_change", args=[killers[0].pk])
    )
    assert WARNING in page.text


def test_clusters_view_counts_the_letters_that_killed_a_worker(killers):
    counts = {
        (c.subscription, c.signature): c.killed_workers for c in dead_letter_clusters()
    }
    assert counts[("notification", DIED_SIGNATURE)] == 1
    assert counts[("notification", NOTIFY_SIGNATURE)] == 0


def test_redrive_action_confirms_with_the_warning_before_anything_moves(
    operator,  # noqa: F811
    operator_client,  # noqa: F811
    killers,
    letters,  # noqa: F811
):
    chosen = [letters[0].pk, killers[1].pk]
    data = {"action": "redrive", "_selected_action": [str(pk) for pk in chosen]}
    page = operator_client.post(reverse(CHANGELIST), data)
    assert page.status_code == 200
    assert page.templates[0].name == "admin/messaging/deadletter/confirm.html"
    assert 'id="killer-warning"' in page.text
    listed = [letter.pk for letter, _ in page.context["letters"]]
    assert listed == [killers[1].pk, letters[0].pk]  # the killer first
    assert WARNING in page.text
    assert not DeadLetter.objects.filter(redriven_at__isnull=False).exists()

    done = operator_client.post(reverse(CHANGELIST), hidden_inputs(page), follow=True)
    assert page_messages(done) == ["Redrove 2 dead letter(s)."]
    assert set(
        DeadLetter.objects.filter(redriven_by=operator).values_list("pk", flat=True)
    ) == set(chosen)
    assert set(
        LogEntry.objects.filter(user=operator, change_message="Redriven.").values_list(
            "object_id", flat=True
        )
    ) == {str(pk) for pk in chosen}


# --- Redrive a cluster ----------------------------------------------------------------


def test_clusters_view_redrives_a_whole_cluster_after_confirmation(
    operator,  # noqa: F811
    operator_client,  # noqa: F811
    letters,  # noqa: F811
):
    clusters = operator_client.get(reverse(CLUSTERS))
    cluster, _, redrive_url = broadcast_row(clusters)
    assert (cluster.subscription, cluster.count) == ("broadcast", 3)
    assert html.escape(redrive_url) in clusters.text
    page = operator_client.get(redrive_url)
    assert page.status_code == 200
    expected = set(
        open_letters()
        .filter(subscription="broadcast", error_signature=cluster.signature)
        .values_list("pk", flat=True)
    )
    assert {x.pk for x, _ in page.context["letters"]} == expected
    assert not DeadLetter.objects.filter(redriven_at__isnull=False).exists()

    done = operator_client.post(
        redrive_url.split("?")[0], hidden_inputs(page), follow=True
    )
    assert done.redirect_chain[-1][0] == reverse(CLUSTERS)
    assert page_messages(done) == ["Redrove 3 dead letter(s)."]
    redriven = DeadLetter.objects.filter(redriven_by=operator)
    assert set(redriven.values_list("pk", flat=True)) == expected
    assert set(
        Delivery.objects.filter(dead_letter__in=redriven).values_list(
            "status", flat=True
        )
    ) == {"pending"}
    assert open_letters().count() == len(letters) - 3
    assert LogEntry.objects.filter(user=operator).count() == 3


def test_cluster_redrive_leaves_a_letter_that_failed_after_the_page_was_shown(
    operator_client,  # noqa: F811
    letters,  # noqa: F811
):
    _, _, redrive_url = broadcast_row(operator_client.get(reverse(CLUSTERS)))
    page = operator_client.get(redrive_url)
    form = hidden_inputs(page)
    late = open_letters().filter(subscription="broadcast").first()
    # It failed again (redriven by someone else meanwhile, dead once more): the
    # operator did not see this failure, so it is not sent back with the others.
    DeadLetter.objects.filter(pk=late.pk).update(
        last_failed_at=page.context["letters"][0][0].last_failed_at.replace(year=2100)
    )
    done = operator_client.post(redrive_url.split("?")[0], form, follow=True)
    assert page_messages(done) == [
        "Redrove 2 dead letter(s).",
        "Skipped 1 dead letter(s): redriven, discarded or failed again since the "
        "page was shown.",
    ]
    late.refresh_from_db()
    assert late.is_open


def test_cluster_redrive_service_takes_only_open_letters_of_that_cluster(
    operator,  # noqa: F811
    letters,  # noqa: F811
):
    # Members 1, 1 and 2 not found: one cluster of three.
    first, second = list(open_letters().filter(last_error=NOTIFY_ERROR.format(1)))
    other = open_letters().get(last_error=NOTIFY_ERROR.format(2))
    dead_letter_discard(ids=[first.pk], user=operator, reason="member deleted")
    count = dead_letter_redrive_cluster(
        subscription="notification",
        signature=NOTIFY_SIGNATURE,
        failed_upto=max(x.last_failed_at for x in letters),
        user=operator,
    )
    assert count == 2
    for letter in (first, second, other):
        letter.refresh_from_db()
    assert second.redriven_at is not None
    assert other.redriven_at is not None
    assert (first.redriven_at, first.is_open) == (None, False)
    assert open_letters().filter(subscription="broadcast").count() == 3


def test_cluster_redrive_needs_the_redrive_permission(django_user_model, letters):  # noqa: F811
    _, client = staff(
        django_user_model, "viewer", "view_deadletter", "change_deadletter"
    )
    clusters = client.get(reverse(CLUSTERS))
    assert clusters.status_code == 200
    assert "Redrive cluster" not in clusters.text
    query = {"subscription": "broadcast", "signature": letters[1].error_signature}
    assert client.get(reverse(REDRIVE_CLUSTER), query).status_code == 403
    posted = {**query, "shown_at": "2100-01-01T00:00:00+00:00", "shown": "3"}
    assert client.post(reverse(REDRIVE_CLUSTER), posted).status_code == 403
    assert not DeadLetter.objects.filter(redriven_at__isnull=False).exists()


# --- Permissions ----------------------------------------------------------------------


def test_change_permission_alone_does_not_redrive_or_discard(
    django_user_model,
    letters,  # noqa: F811
):
    _, client = staff(
        django_user_model, "clerk", "view_deadletter", "change_deadletter"
    )
    listing = client.get(reverse(CHANGELIST))
    assert 'value="redrive"' not in listing.text
    assert 'value="discard"' not in listing.text
    for action in ("redrive", "discard"):
        client.post(
            reverse(CHANGELIST),
            {
                "action": action,
                "_selected_action": [str(letters[0].pk)],
                "post": "yes",
                "reason": "no",
            },
        )
    letters[0].refresh_from_db()
    assert letters[0].is_open


def test_the_named_permission_grants_its_action_only(
    django_user_model,
    letters,  # noqa: F811
):
    user, client = staff(
        django_user_model, "redriver", "view_deadletter", "redrive_deadletter"
    )
    listing = client.get(reverse(CHANGELIST))
    assert 'value="redrive"' in listing.text
    assert 'value="discard"' not in listing.text
    data = {
        "action": "redrive",
        "_selected_action": [str(letters[0].pk)],
        "post": "yes",
    }
    client.post(reverse(CHANGELIST), data)
    letters[0].refresh_from_db()
    assert letters[0].redriven_by == user


# --- Discard --------------------------------------------------------------------------


def test_discard_asks_why_then_archives_with_who_and_why(
    operator,  # noqa: F811
    operator_client,  # noqa: F811
    letters,  # noqa: F811
):
    letter = letters[0]
    data = {"action": "discard", "_selected_action": [str(letter.pk)]}
    page = operator_client.post(reverse(CHANGELIST), data)
    assert page.status_code == 200
    assert 'name="reason"' in page.text
    no_reason = operator_client.post(
        reverse(CHANGELIST), {**hidden_inputs(page), "reason": "  "}
    )
    assert no_reason.status_code == 200
    assert no_reason.context["form"].errors["reason"]
    letter.refresh_from_db()
    assert letter.is_open

    done = operator_client.post(
        reverse(CHANGELIST),
        {**hidden_inputs(page), "reason": "member 1 left the library"},
        follow=True,
    )
    assert page_messages(done) == ["Discarded 1 dead letter(s)."]
    letter.refresh_from_db()
    assert (letter.discarded_by, letter.discard_reason) == (
        operator,
        "member 1 left the library",
    )
    assert letter.discarded_at is not None
    assert not letter.is_open
    assert DeadLetter.objects.count() == len(letters)  # archived, not deleted
    assert Delivery.objects.get(pk=letter.delivery_id).status == "dead"
    assert LogEntry.objects.filter(user=operator, object_id=str(letter.pk)).values_list(
        "change_message", flat=True
    ).get() == ("Discarded: member 1 left the library")


def test_discarded_letters_leave_the_open_list_and_count_but_stay_visible(
    operator,  # noqa: F811
    operator_client,  # noqa: F811
    letters,  # noqa: F811
):
    dead_letter_discard(ids=[letters[0].pk], user=operator, reason="duplicate")
    url = reverse(CHANGELIST)
    assert operator_client.get(url + "?state=open").context["cl"].result_count == 5
    discarded = operator_client.get(url + "?state=discarded")
    assert [x.pk for x in discarded.context["cl"].result_list] == [letters[0].pk]
    assert "discarded" in discarded.text
    assert "by operator: duplicate" in discarded.text
    assert operator_client.get(url).context["cl"].result_count == 6
    assert dead_letter_open_count() == 5
    assert sum(c.count for c in dead_letter_clusters()) == 5


def test_discarded_letter_is_not_redriven(operator, letters):  # noqa: F811
    dead_letter_discard(ids=[letters[0].pk], user=operator, reason="duplicate")
    assert dead_letter_redrive(ids=[letters[0].pk], user=operator) == 0
    assert dead_letter_discard(ids=[letters[0].pk], user=operator, reason="again") == 0
    letters[0].refresh_from_db()
    assert letters[0].discard_reason == "duplicate"
    assert Delivery.objects.get(pk=letters[0].delivery_id).status == "dead"


def test_discard_service_refuses_an_empty_reason(operator, letters):  # noqa: F811
    with pytest.raises(DeadLetterError):
        dead_letter_discard(ids=[letters[0].pk], user=operator, reason=" ")
    letters[0].refresh_from_db()
    assert letters[0].is_open

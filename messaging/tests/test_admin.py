"""The messaging admin: staff only, read-only logs, redrive by POST, clusters, index."""

import datetime
import re
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from library.services import loan_issue
from messaging.models import DeadLetter, Delivery, OutboxMessage
from messaging.tests.test_selectors import (
    BROADCAST_ERROR,
    NOTIFY_ERROR,
    NOTIFY_SIGNATURE,
    break_subscribers,
    issue_and_drain,
)

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:messaging_deadletter_changelist"
CLUSTERS = "admin:messaging_deadletter_clusters"


@pytest.fixture
def letters(library_rows, monkeypatch):
    """Six open dead letters: notification x3 (two errors), broadcast x3."""
    break_subscribers(monkeypatch)
    issue_and_drain(1, 1, 2)
    return list(DeadLetter.objects.order_by("id"))


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user(
        "operator", is_staff=True, is_superuser=True
    )


@pytest.fixture
def operator_client(operator):
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def viewer(django_user_model):
    """Staff who may look at dead letters but not change (redrive) them."""
    user = django_user_model.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="view_deadletter"),
        Permission.objects.get(codename="view_outboxmessage"),
    )
    return user


def admin_pages(letter):
    return [
        reverse("admin:index"),
        reverse("admin:messaging_outboxmessage_changelist"),
        reverse(
            "admin:messaging_outboxmessage_change", args=[letter.delivery.message_id]
        ),
        reverse("admin:messaging_delivery_changelist"),
        reverse("admin:messaging_delivery_change", args=[letter.delivery_id]),
        reverse(CHANGELIST),
        reverse("admin:messaging_deadletter_change", args=[letter.pk]),
        reverse(CLUSTERS),
    ]


def csrf_token(client, url):
    response = client.get(url)
    assert response.status_code == 200
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.text)
    assert match, "the changelist renders the action form with a CSRF token"
    return match.group(1)


def post_redrive(client, ids, *, token=None):
    """Post the confirmed redrive, as the confirmation page's form sends it."""
    data = {
        "action": "redrive",
        "_selected_action": [str(pk) for pk in ids],
        "post": "yes",
    }
    if token is not None:
        data["csrfmiddlewaretoken"] = token
    return client.post(reverse(CHANGELIST), data, follow=True)


def page_messages(response):
    return [str(m) for m in response.context["messages"]]


# --- Access ---------------------------------------------------------------------------


def test_anonymous_is_sent_to_the_login_on_every_page(client, letters):
    for url in admin_pages(letters[0]):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


def test_non_staff_is_sent_to_the_login_on_every_page(
    client, letters, django_user_model
):
    client.force_login(django_user_model.objects.create_user("reader"))
    for url in admin_pages(letters[0]):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


def test_staff_without_messaging_permissions_is_refused(
    client, letters, django_user_model
):
    client.force_login(django_user_model.objects.create_user("desk", is_staff=True))
    index, *pages = admin_pages(letters[0])
    for url in pages:
        assert client.get(url).status_code == 403, url
    response = client.get(index)
    assert response.status_code == 200
    assert 'id="messaging-overview"' not in response.text
    assert "open dead letter" not in response.text


def test_superuser_opens_every_page(operator_client, letters):
    for url in admin_pages(letters[0]):
        assert operator_client.get(url).status_code == 200, url


# --- Read-only logs -------------------------------------------------------------------


def test_outbox_cannot_be_added_changed_or_deleted(operator_client, letters):
    message = OutboxMessage.objects.earliest("id")
    assert operator_client.get(
        reverse("admin:messaging_outboxmessage_add")
    ).status_code == (403)
    delete = reverse("admin:messaging_outboxmessage_delete", args=[message.pk])
    assert operator_client.post(delete, {"post": "yes"}).status_code == 403
    change = reverse("admin:messaging_outboxmessage_change", args=[message.pk])
    assert operator_client.post(change, {"key": "changed"}).status_code == 403
    changelist = operator_client.get(
        reverse("admin:messaging_outboxmessage_changelist")
    )
    assert "delete_selected" not in changelist.text
    assert OutboxMessage.objects.filter(pk=message.pk, key="1").exists()


def test_outbox_change_page_shows_its_deliveries_read_only(operator_client, letters):
    message = letters[0].delivery.message
    response = operator_client.get(
        reverse("admin:messaging_outboxmessage_change", args=[message.pk])
    )
    assert NOTIFY_ERROR.format(1) in response.text
    assert BROADCAST_ERROR in response.text
    assert 'name="deliveries-0-status"' not in response.text  # no inline form fields
    assert 'type="submit" value="Save"' not in response.text


def test_outbox_list_summarises_each_message_deliveries(operator_client, letters):
    response = operator_client.get(reverse("admin:messaging_outboxmessage_changelist"))
    text = re.sub(r"<[^>]+>", "", response.text)
    assert "notification ✗ · stock_summary ✓ · broadcast ✗" in text


def test_dead_letter_page_is_read_only(operator_client, letters):
    letter = letters[0]
    url = reverse("admin:messaging_deadletter_change", args=[letter.pk])
    assert 'type="submit" value="Save"' not in operator_client.get(url).text
    assert operator_client.post(url, {"attempts": 0}).status_code == 403
    assert reverse("admin:messaging_deadletter_add")  # the URL exists, and refuses:
    assert operator_client.get(
        reverse("admin:messaging_deadletter_add")
    ).status_code == (403)
    delete = reverse("admin:messaging_deadletter_delete", args=[letter.pk])
    assert operator_client.post(delete, {"post": "yes"}).status_code == 403
    assert DeadLetter.objects.count() == len(letters)


# --- Redrive --------------------------------------------------------------------------


def test_redrive_action_by_post_with_csrf_resets_the_deliveries(operator, letters):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    token = csrf_token(client, reverse(CHANGELIST))
    chosen = letters[:2]
    response = post_redrive(client, [x.pk for x in chosen], token=token)
    assert response.status_code == 200
    assert page_messages(response) == ["Redrove 2 dead letter(s)."]
    for letter in chosen:
        letter.refresh_from_db()
        assert letter.redriven_by == operator
        assert letter.redriven_at is not None
        assert letter.redrive_count == 1
        delivery = Delivery.objects.get(pk=letter.delivery_id)
        assert (delivery.status, delivery.attempts) == ("pending", 0)
        assert delivery.available_at <= timezone.now()
    untouched = Delivery.objects.get(pk=letters[2].delivery_id)
    assert (untouched.status, untouched.attempts) == ("dead", 1)


def test_second_redrive_of_the_same_letter_redrives_none(operator, letters):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    token = csrf_token(client, reverse(CHANGELIST))
    ids = [letters[0].pk]
    post_redrive(client, ids, token=token)
    again = post_redrive(client, [*ids, letters[1].pk], token=token)
    assert page_messages(again) == [
        "Redrove 1 dead letter(s).",
        "Skipped 1 dead letter(s): already redriven or discarded.",
    ]
    alone = post_redrive(client, ids, token=token)
    assert page_messages(alone) == [
        "Skipped 1 dead letter(s): already redriven or discarded."
    ]
    letters[0].refresh_from_db()
    assert letters[0].redrive_count == 1


def test_redrive_without_csrf_token_is_refused(operator, letters):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    client.get(reverse(CHANGELIST))  # a CSRF cookie, but no token in the form
    response = client.post(
        reverse(CHANGELIST),
        {"action": "redrive", "_selected_action": [str(letters[0].pk)]},
    )
    assert response.status_code == 403
    assert DeadLetter.objects.filter(redriven_at__isnull=False).count() == 0


def test_get_with_action_parameters_changes_nothing(operator_client, letters):
    query = urlencode({"action": "redrive", "_selected_action": letters[0].pk})
    response = operator_client.get(f"{reverse(CHANGELIST)}?{query}")
    # Unknown lookups send the stock changelist back to itself with ?e=1.
    assert response.status_code in (200, 302)
    assert DeadLetter.objects.filter(redriven_at__isnull=False).count() == 0
    assert Delivery.objects.filter(status="dead").count() == len(letters)


def test_staff_without_change_permission_cannot_redrive(viewer, letters):
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer)
    token = csrf_token(client, reverse(CHANGELIST))
    listing = client.get(reverse(CHANGELIST))
    assert 'value="redrive"' not in listing.text
    response = post_redrive(client, [letters[0].pk], token=token)
    assert response.status_code == 200
    assert "Redrove" not in " ".join(page_messages(response))
    letters[0].refresh_from_db()
    assert letters[0].redriven_at is None
    assert Delivery.objects.get(pk=letters[0].delivery_id).status == "dead"


# --- Filters and clusters -------------------------------------------------------------


def test_open_filter_shows_everything_by_default(operator_client, letters, operator):
    from messaging.services import dead_letter_redrive

    dead_letter_redrive(ids=[letters[0].pk], user=operator)
    url = reverse(CHANGELIST)
    assert operator_client.get(url).context["cl"].result_count == 6
    assert operator_client.get(url + "?state=open").context["cl"].result_count == 5
    redriven = operator_client.get(url + "?state=redriven").context["cl"]
    assert [x.pk for x in redriven.result_list] == [letters[0].pk]


def test_clusters_view_groups_open_letters(operator_client, letters):
    now = timezone.now()
    oldest = letters[0]
    assert oldest.subscription == "notification"
    DeadLetter.objects.filter(pk=oldest.pk).update(
        last_failed_at=now - datetime.timedelta(hours=3)
    )
    response = operator_client.get(reverse(CLUSTERS))
    assert response.status_code == 200
    rows = [
        (c.subscription, c.signature, c.count) for c, *_ in response.context["rows"]
    ]
    # Members 1, 1 and 2 not found: one failure, one cluster.
    assert rows == [
        ("notification", NOTIFY_SIGNATURE, 3),
        ("broadcast", BROADCAST_ERROR, 3),
    ]
    ages = [c.oldest for c, *_ in response.context["rows"]]
    assert (
        datetime.timedelta(hours=3) <= ages[0] < datetime.timedelta(hours=3, minutes=1)
    )
    assert ages[1] < datetime.timedelta(minutes=1)
    assert "3 h" in response.text
    assert NOTIFY_SIGNATURE.replace("<", "&lt;").replace(">", "&gt;") in response.text
    assert response.context["total"] == 6


def test_cluster_link_lists_exactly_that_clusters_open_letters(
    operator_client, letters, operator
):
    from messaging.services import dead_letter_redrive

    response = operator_client.get(reverse(CLUSTERS))
    (cluster, url, _) = next(
        row for row in response.context["rows"] if row[0].subscription == "notification"
    )
    assert cluster.signature == NOTIFY_SIGNATURE
    assert url in response.text.replace("&amp;", "&")
    listed = operator_client.get(url).context["cl"]
    expected = DeadLetter.objects.filter(subscription="notification")
    assert {x.pk for x in listed.result_list} == set(
        expected.values_list("pk", flat=True)
    )
    assert listed.result_count == 3
    # Redriven letters drop out of the cluster's (open) list.
    dead_letter_redrive(ids=[expected[0].pk], user=operator)
    assert operator_client.get(url).context["cl"].result_count == 2


def test_changelist_links_to_the_clusters_view(operator_client, letters):
    response = operator_client.get(reverse(CHANGELIST))
    assert f'href="{reverse(CLUSTERS)}"' in response.text


# --- Index ----------------------------------------------------------------------------


def open_count_on_index(client):
    response = client.get(reverse("admin:index"))
    assert response.status_code == 200
    match = re.search(
        r'<a class="count" href="([^"]+)">(\d+)</a>\s*<a[^>]*>open dead letters?</a>',
        response.text,
    )
    assert match, "the index shows the open dead-letter count"
    assert match.group(1).startswith(reverse(CHANGELIST))
    return int(match.group(2)), response


def test_index_shows_the_open_dead_letter_count(operator_client, letters, operator):
    from messaging.services import dead_letter_redrive

    count, response = open_count_on_index(operator_client)
    assert count == 6
    assert "stock_summary" in response.text
    dead_letter_redrive(ids=[letters[0].pk, letters[1].pk], user=operator)
    assert open_count_on_index(operator_client)[0] == 4


def test_index_shows_outbox_lag_of_unrelayed_messages(operator_client, library_rows):
    loan_issue(book_id=1, member_id=1)
    OutboxMessage.objects.update(
        created_at=timezone.now() - datetime.timedelta(hours=2)
    )
    count, response = open_count_on_index(operator_client)
    assert count == 0
    assert "2 h (1 waiting)" in response.text


# --- Query counts ---------------------------------------------------------------------


@pytest.fixture
def thirty_letters(library_rows, monkeypatch):
    """Thirty dead letters from fifteen messages (two failing subscriptions each)."""
    break_subscribers(monkeypatch)
    issue_and_drain(*[n % 3 + 1 for n in range(15)])
    assert DeadLetter.objects.count() == 30


@pytest.mark.parametrize(
    "name",
    [
        "admin:messaging_deadletter_changelist",
        "admin:messaging_delivery_changelist",
        "admin:messaging_outboxmessage_changelist",
        "admin:messaging_deadletter_clusters",
        "admin:index",
    ],
)
def test_query_count_does_not_grow_with_rows(
    name, operator_client, thirty_letters, django_assert_max_num_queries
):
    url = reverse(name)
    operator_client.get(url)  # warm the content-type and permission caches
    with django_assert_max_num_queries(10):
        response = operator_client.get(url)
    assert response.status_code == 200
    if "cl" in response.context:
        assert len(response.context["cl"].result_list) >= 15

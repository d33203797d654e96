"""The depth admin: subscriptions, partitions and stream consumers (with rewind)."""

import datetime
import re

import pytest
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from library.models import StockProjection
from messaging.models import (
    Delivery,
    LogRetention,
    OutboxMessage,
    PartitionLease,
    StreamConsumer,
    SubscriptionState,
)
from messaging.registry import SUBSCRIPTIONS, MessageType
from messaging.selectors import (
    partitioned_loads,
    stream_overview,
    subscription_depths,
)
from messaging.services import outbox_publish, relay_pending
from messaging.services.partitions import partition_loads

pytestmark = pytest.mark.django_db

SUBSCRIPTIONS_URL = "admin:messaging_subscriptionstate_changelist"
PARTITIONS_URL = "admin:messaging_partitionlease_changelist"
STREAMS_URL = "admin:messaging_streamconsumer_changelist"
CONSUMER = "stock_projection"


def rewind_url(name=CONSUMER):
    return reverse("admin:messaging_streamconsumer_rewind", args=[name])


def publish(key, *, type=MessageType.STOCK_CORRECTED):
    """Append one message (the relay does not read bodies) and return it."""
    with transaction.atomic():
        return outbox_publish(
            type=type,
            key=key,
            body={"book_id": int(key), "branch_id": 1, "on_shelf": 1},
        )


def text_of(response):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.text))


def page_messages(response):
    return [str(m) for m in response.context["messages"]]


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
def log_rows(db):
    """Four messages published 6, 4, 2 and 1 hours ago (offsets in the list)."""
    now = timezone.now()
    messages = [publish(str(n)) for n in (1, 2, 3, 4)]
    for message, hours in zip(messages, (6, 4, 2, 1), strict=True):
        OutboxMessage.objects.filter(pk=message.pk).update(
            created_at=now - datetime.timedelta(hours=hours)
        )
    return [m.pk for m in messages]


@pytest.fixture
def consumer(log_rows):
    """The stock projection consumer caught up, with one projected book."""
    StockProjection.objects.create(
        book_id=1, branch_id=1, on_shelf=1, book_version=1, offset=log_rows[0]
    )
    return StreamConsumer.objects.create(
        name=CONSUMER, offset=log_rows[-1], applied_total=len(log_rows)
    )


def pages(lease_pk=None):
    urls = [
        reverse(SUBSCRIPTIONS_URL),
        reverse("admin:messaging_subscriptionstate_change", args=["notification"]),
        reverse(PARTITIONS_URL),
        reverse(STREAMS_URL),
        reverse("admin:messaging_streamconsumer_change", args=[CONSUMER]),
        rewind_url(),
    ]
    if lease_pk is not None:
        urls.append(reverse("admin:messaging_partitionlease_change", args=[lease_pk]))
    return urls


# --- Access ---------------------------------------------------------------------------


@pytest.fixture
def every_row(consumer):
    relay_pending()  # creates the subscription states
    return PartitionLease.objects.create(subscription="book_ledger", partition=0)


def test_staff_opens_every_page(operator_client, every_row):
    for url in pages(every_row.pk):
        assert operator_client.get(url).status_code == 200, url


def test_anonymous_is_sent_to_the_login(client, every_row):
    for url in pages(every_row.pk):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    response = client.post(rewind_url(), {"offset": 0})
    assert response.status_code == 302
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None


def test_signed_in_non_staff_is_refused(client, every_row, django_user_model):
    client.force_login(django_user_model.objects.create_user("reader"))
    for url in pages(every_row.pk):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    client.post(rewind_url(), {"offset": 0})
    client.post(
        reverse(SUBSCRIPTIONS_URL),
        {"action": "pause", "_selected_action": ["notification"]},
    )
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None
    assert SubscriptionState.objects.get(name="notification").active


def test_staff_who_may_only_view_cannot_rewind_or_start(
    client, every_row, django_user_model
):
    viewer = django_user_model.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(
        Permission.objects.get(codename="view_streamconsumer"),
        Permission.objects.get(codename="view_subscriptionstate"),
    )
    client.force_login(viewer)
    listing = client.get(reverse(STREAMS_URL))
    assert listing.status_code == 200
    assert 'value="rewind"' not in listing.text
    assert client.get(rewind_url()).status_code == 403
    assert client.post(rewind_url(), {"offset": 0}).status_code == 403
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None
    subscriptions = client.get(reverse(SUBSCRIPTIONS_URL))
    assert 'value="pause"' not in subscriptions.text
    client.post(
        reverse(SUBSCRIPTIONS_URL),
        {"action": "pause", "_selected_action": ["notification"]},
    )
    assert SubscriptionState.objects.get(name="notification").active


def test_rows_cannot_be_added_changed_or_deleted(operator_client, every_row):
    offset = StreamConsumer.objects.get(name=CONSUMER).offset
    for model in ("subscriptionstate", "partitionlease", "streamconsumer"):
        add = reverse(f"admin:messaging_{model}_add")
        assert operator_client.get(add).status_code == 403, model
    change = reverse("admin:messaging_streamconsumer_change", args=[CONSUMER])
    assert 'type="submit" value="Save"' not in operator_client.get(change).text
    assert operator_client.post(change, {"offset": 0}).status_code == 403
    delete = reverse("admin:messaging_subscriptionstate_delete", args=["notification"])
    assert operator_client.post(delete, {"post": "yes"}).status_code == 403
    assert StreamConsumer.objects.get(name=CONSUMER).offset == offset
    assert SubscriptionState.objects.filter(name="notification").exists()


# --- Subscriptions: depth, lag, age, start and pause ----------------------------------


@pytest.fixture
def backlog(db):
    """Three relayed messages and one unrelayed; notification finished the first.

    Offsets m1 < m2 < m3 < m4. The oldest message notification still owes is m2,
    published 2 hours ago; stock_summary still owes m1, published 3 hours ago.
    """
    now = timezone.now()
    m1, m2, m3 = (publish(str(n), type=MessageType.LOAN_ISSUED) for n in (1, 2, 3))
    relay_pending()
    m4 = publish("4", type=MessageType.STOCK_CORRECTED)
    for message, hours in ((m1, 3), (m2, 2), (m3, 1)):
        OutboxMessage.objects.filter(pk=message.pk).update(
            created_at=now - datetime.timedelta(hours=hours)
        )
    Delivery.objects.filter(subscription="notification", message=m1).update(
        status=Delivery.Status.DONE
    )
    return now, [m.pk for m in (m1, m2, m3, m4)]


def test_depth_lag_and_age_per_subscription(backlog):
    now, (m1, m2, _, m4) = backlog
    depths = {d.name: d for d in subscription_depths(now=now)}
    notification = depths["notification"]
    assert notification.depth == 2
    # From m2 (owed) to m4 (the head), both included; m4 is not even relayed yet.
    assert notification.lag == m4 - m2 + 1 == 3
    assert notification.oldest_pending_age == datetime.timedelta(hours=2)
    stock = depths["stock_summary"]
    assert (stock.depth, stock.lag) == (3, m4 - m1 + 1)
    assert stock.lag == 4
    assert stock.oldest_pending_age == datetime.timedelta(hours=3)
    # Takes no library messages: nothing pending, no lag, no age.
    probe = depths["lab_probe"]
    assert (probe.depth, probe.lag, probe.oldest_pending_age) == (0, 0, None)


def test_subscriptions_page_lists_every_registered_subscription(
    operator_client, backlog
):
    SubscriptionState.objects.all().delete()  # as before any relay ran
    response = operator_client.get(reverse(SUBSCRIPTIONS_URL))
    assert response.status_code == 200
    rows = {row.name: row for row in response.context["cl"].result_list}
    assert set(rows) == set(SUBSCRIPTIONS)
    assert (rows["notification"].depth, rows["notification"].lag) == (2, 3)
    assert (rows["stock_summary"].depth, rows["stock_summary"].lag) == (3, 4)
    assert not rows["lab_late"].active  # declared with starts_active=False
    assert response.context["title"] == "Subscriptions"
    text = text_of(response)
    assert "notification loan_issued, return_received main — active" in text
    assert "book_ledger loan_issued, return_received, stock_corrected main 4" in text
    assert "lab_slow lab_probe slow — paused" in text
    assert " 2 3 2 h " in text  # notification: depth, lag, oldest pending
    assert " 3 4 3 h " in text  # stock_summary
    pending = "status__exact=pending&amp;subscription=notification"
    assert pending in response.text


def test_subscriptions_sort_by_lag(operator_client, backlog):
    response = operator_client.get(reverse(SUBSCRIPTIONS_URL) + "?o=-8")
    lags = [(row.lag, row.name) for row in response.context["cl"].result_list]
    assert [lag for lag, _ in lags] == sorted((lag for lag, _ in lags), reverse=True)
    assert lags[0][0] == 4
    assert (3, "notification") in lags


def post_action(client, action, names):
    return client.post(
        reverse(SUBSCRIPTIONS_URL),
        {"action": action, "_selected_action": names},
        follow=True,
    )


def test_start_and_pause_actions_change_state(operator_client, backlog):
    _, offsets = backlog
    operator_client.get(reverse(SUBSCRIPTIONS_URL))
    assert not SubscriptionState.objects.get(name="lab_late").active
    response = post_action(operator_client, "start", ["lab_late", "lab_slow"])
    assert page_messages(response) == ["Started 2 subscription(s): lab_late, lab_slow."]
    late = SubscriptionState.objects.get(name="lab_late")
    # Started now: it takes copies of what comes after the newest message only.
    assert (late.active, late.starts_after) == (True, offsets[-1])
    response = post_action(operator_client, "pause", ["notification", "lab_late"])
    assert page_messages(response) == [
        "Paused 2 subscription(s): lab_late, notification."
    ]
    assert not SubscriptionState.objects.get(name="notification").active
    assert not SubscriptionState.objects.get(name="lab_late").active


def test_start_leaves_an_active_subscription_where_it_starts(operator_client, backlog):
    operator_client.get(reverse(SUBSCRIPTIONS_URL))
    before = SubscriptionState.objects.get(name="notification").starts_after
    publish("5")  # unrelayed: restarting would cut notification off from it
    response = post_action(operator_client, "start", ["notification"])
    assert page_messages(response) == [
        "Left 1 subscription(s) as they were: already active."
    ]
    assert SubscriptionState.objects.get(name="notification").starts_after == before


def test_actions_need_a_csrf_token(operator, backlog):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    client.get(reverse(SUBSCRIPTIONS_URL))
    response = client.post(
        reverse(SUBSCRIPTIONS_URL),
        {"action": "pause", "_selected_action": ["notification"]},
    )
    assert response.status_code == 403
    assert SubscriptionState.objects.get(name="notification").active


# --- Partitions -----------------------------------------------------------------------


@pytest.fixture
def hot_book(db):
    """book_ledger deliveries: book 5 three times and book 1 once (both partition 1),
    book 2 once (partition 2); partition 1 leased, partition 2's lease expired."""
    for key in ("5", "1", "5", "2", "5"):
        publish(key)
    relay_pending()
    now = timezone.now()
    for partition in range(4):
        PartitionLease.objects.create(subscription="book_ledger", partition=partition)
    PartitionLease.objects.filter(partition=1).update(
        owner="worker-a", leased_until=now + datetime.timedelta(seconds=30)
    )
    PartitionLease.objects.filter(partition=2).update(
        owner="worker-b",
        leased_until=now - datetime.timedelta(seconds=5),
        processed=7,
    )


def test_partitions_page_shows_loads_hot_key_and_owner(operator_client, hot_book):
    response = operator_client.get(reverse(PARTITIONS_URL))
    assert response.status_code == 200
    rows = response.context["cl"].result_list
    assert [r.load for r in rows] == partition_loads("book_ledger") == [0, 4, 1, 0]
    hot = rows[1]
    assert (hot.hot_key, hot.hot_key_load) == ("5", 3)
    first_five = OutboxMessage.objects.filter(key="5").order_by("id")[0].pk
    assert hot.head_offset == first_five
    text = text_of(response)
    assert "book_ledger 1 4 5 (3 pending)" in text
    assert "worker-a" in text
    assert "(expired)" in text  # partition 2's lease, free for the next worker
    assert "book_ledger: 5 pending over 4 partitions, hottest partition 1" in text


def test_partition_loads_count_partitions_without_a_lease_row(hot_book):
    PartitionLease.objects.all().delete()
    (ledger,) = partitioned_loads()
    assert (ledger.subscription, ledger.loads) == ("book_ledger", [0, 4, 1, 0])
    assert (ledger.total, ledger.peak, ledger.hottest) == (5, 4, 1)


def test_partitions_sort_by_load(operator_client, hot_book):
    # Column 3: the action checkbox comes first, then subscription and partition.
    response = operator_client.get(reverse(PARTITIONS_URL) + "?o=-3")
    assert [r.partition for r in response.context["cl"].result_list][:2] == [1, 2]


# --- Stream consumers: lag, retention, rewind -----------------------------------------


def test_streams_page_shows_gap_retention_and_the_slowest_consumer(
    operator_client, consumer, log_rows
):
    StreamConsumer.objects.filter(name=CONSUMER).update(offset=log_rows[1])
    LogRetention.objects.create(
        pk=1,
        earliest_offset=log_rows[1],
        trimmed_total=5,
        last_trim_at=timezone.now(),
    )
    response = operator_client.get(reverse(STREAMS_URL))
    (row,) = response.context["cl"].result_list
    assert row.gap == log_rows[-1] - log_rows[1] == 2
    log = response.context["log"]
    assert (log.newest_offset, log.earliest_offset, log.trimmed_total) == (
        log_rows[-1],
        log_rows[1],
        5,
    )
    # It has read one kept message (log_rows[1]); one more trim may cut it.
    assert (log.slowest, log.slowest_gap_to_earliest) == (CONSUMER, 1)
    text = text_of(response)
    assert f"Earliest offset (kept from) {log_rows[1]}" in text
    assert "Trimmed in total 5" in text
    assert response.context["not_started"] == []  # it has a row
    assert "1 (stock_projection)" in text


def test_trimmed_consumer_is_highlighted_with_its_error(operator_client, consumer):
    StreamConsumer.objects.filter(name=CONSUMER).update(
        state=StreamConsumer.State.TRIMMED, last_error="its next offset 2 was trimmed"
    )
    response = operator_client.get(reverse(STREAMS_URL))
    assert '<span class="stream-trimmed">trimmed</span>' in response.text
    assert "its next offset 2 was trimmed" in response.text


def test_slowest_gap_goes_below_zero_when_a_consumer_is_cut(consumer, log_rows):
    StreamConsumer.objects.filter(name=CONSUMER).update(offset=log_rows[0])
    LogRetention.objects.create(pk=1, earliest_offset=log_rows[2] + 1)
    overview = stream_overview()
    assert overview.slowest_gap_to_earliest == log_rows[0] - log_rows[2] == -2


def test_unstarted_consumer_is_listed_with_a_rewind_link(operator_client, log_rows):
    response = operator_client.get(reverse(STREAMS_URL))
    assert response.context["not_started"] == [CONSUMER]
    assert f'href="{rewind_url()}"' in response.text
    overview = response.context["log"]
    assert (overview.slowest, overview.slowest_gap_to_earliest) == (CONSUMER, 0)


def test_rewind_action_opens_the_confirmation_page(operator_client, consumer):
    response = operator_client.post(
        reverse(STREAMS_URL), {"action": "rewind", "_selected_action": [CONSUMER]}
    )
    assert response.status_code == 302
    assert response["Location"] == rewind_url()
    page = operator_client.get(response["Location"])
    assert page.status_code == 200
    assert 'name="offset"' in page.text
    assert 'name="at"' in page.text
    assert 'name="rebuild"' in page.text
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None


def test_a_rebuild_from_the_middle_of_the_log_is_refused(operator_client, consumer):
    target = consumer.offset - 2
    response = operator_client.post(rewind_url(), {"offset": target, "rebuild": "on"})
    assert response.status_code == 200  # the form again, with the reason
    assert "a rebuild replays the whole kept log: rewind to 0" in text_of(response)
    consumer.refresh_from_db()
    assert consumer.offset == target + 2
    assert StockProjection.objects.exists()


def test_rewind_to_the_start_with_rebuild(operator, operator_client, consumer):
    target = 0
    response = operator_client.post(
        rewind_url(), {"offset": target, "rebuild": "on"}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse(STREAMS_URL)
    assert page_messages(response) == [
        f"Rewound {CONSUMER} to offset {target}, projection emptied for a rebuild: "
        f"it replays from offset {target + 1}."
    ]
    consumer.refresh_from_db()
    assert (consumer.offset, consumer.rewound_to) == (target, target)
    assert consumer.rewound_by == operator
    assert not StockProjection.objects.exists()
    assert f"by operator to {target}" in text_of(response)


def test_rewind_without_rebuild_keeps_the_projection(operator_client, consumer):
    operator_client.post(rewind_url(), {"offset": 0})
    assert StreamConsumer.objects.get(name=CONSUMER).offset == 0
    assert StockProjection.objects.count() == 1


def test_rewind_to_a_time_read_as_utc(operator_client, consumer, log_rows, settings):
    # The site's zone is UTC by default; a zone three hours away proves the form
    # reads the time as UTC and not in the site's zone.
    settings.TIME_ZONE = "Europe/Istanbul"
    moment = timezone.now() - datetime.timedelta(hours=2, minutes=30)
    at = moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    response = operator_client.post(rewind_url(), {"at": at})
    assert response.status_code == 302
    # The first message at or after the moment is the one of 2 hours ago (the
    # third): the replay starts there. Read as Istanbul time (UTC+3) the moment
    # would be 5.5 hours ago, and the replay would start at the second.
    assert StreamConsumer.objects.get(name=CONSUMER).offset == log_rows[2] - 1


def test_rewind_to_a_trimmed_offset_is_a_form_error(operator_client, consumer):
    LogRetention.objects.create(pk=1, earliest_offset=consumer.offset - 1)
    response = operator_client.post(rewind_url(), {"offset": consumer.offset - 3})
    assert response.status_code == 200
    errors = response.context["form"].non_field_errors()
    assert errors == [
        f"offset {consumer.offset - 3} is not kept: the log starts at "
        f"{consumer.offset - 1}, so the lowest offset to rewind to is "
        f"{consumer.offset - 2}"
    ]
    assert 'class="errornote"' in response.text
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None


def test_rewind_needs_an_offset_or_a_time_not_both(operator_client, consumer):
    for data in ({}, {"offset": 1, "at": "2026-01-01T00:00:00"}):
        response = operator_client.post(rewind_url(), data)
        assert response.status_code == 200
        assert response.context["form"].non_field_errors() == [
            "Give either an offset or a time, not both."
        ]
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None


def test_rewind_of_an_unknown_consumer_is_not_found(operator_client, consumer):
    assert operator_client.get(rewind_url("nobody")).status_code == 404


def test_rewind_needs_a_csrf_token(operator, consumer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    page = client.get(rewind_url())
    refused = client.post(rewind_url(), {"offset": 0})
    assert refused.status_code == 403
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token
    accepted = client.post(
        rewind_url(), {"offset": 0, "csrfmiddlewaretoken": token.group(1)}
    )
    assert accepted.status_code == 302
    assert StreamConsumer.objects.get(name=CONSUMER).offset == 0


# --- Query counts ---------------------------------------------------------------------


@pytest.mark.parametrize("name", [SUBSCRIPTIONS_URL, PARTITIONS_URL, STREAMS_URL])
def test_query_count_does_not_grow_with_rows(
    name, operator_client, hot_book, django_assert_max_num_queries
):
    StreamConsumer.objects.create(name=CONSUMER)
    url = reverse(name)
    operator_client.get(url)  # warm the caches and create the subscription rows
    with django_assert_max_num_queries(12):
        assert operator_client.get(url).status_code == 200

"""Rewind refuses an offset past the newest message or beyond the 64-bit range."""

import pytest
from django.test import Client
from django.urls import reverse

from messaging.models import LogRetention, OutboxMessage, StreamConsumer
from messaging.services.streams import RewindError, stream_rewind
from messaging.tests.test_admin_depth import CONSUMER, publish, rewind_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(django_user_model):
    client = Client()
    client.force_login(
        django_user_model.objects.create_user(
            "operator", is_staff=True, is_superuser=True
        )
    )
    return client


@pytest.fixture
def head():
    """Three messages and the consumer caught up; return the newest offset."""
    newest = [publish(str(n)) for n in (1, 2, 3)][-1].pk
    StreamConsumer.objects.create(name=CONSUMER, offset=newest)
    return newest


def test_service_refuses_an_offset_past_the_newest_message(head):
    with pytest.raises(RewindError) as caught:
        stream_rewind(CONSUMER, offset=head + 1, rebuild=False)
    assert str(caught.value) == (
        f"offset {head + 1} is past the end of the log: the newest offset is "
        f"{head}, so the highest offset to rewind to is {head}"
    )
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None


def test_service_refuses_an_offset_beyond_64_bits_without_touching_the_db(head):
    with pytest.raises(RewindError):
        stream_rewind(CONSUMER, offset=2**70, rebuild=False)


def test_service_accepts_the_newest_offset(head):
    stream_rewind(CONSUMER, offset=head, rebuild=False)
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_to == head


def test_log_trimmed_to_nothing_keeps_its_head_as_the_highest_offset(head):
    OutboxMessage.objects.all().delete()
    LogRetention.objects.create(pk=1, earliest_offset=head + 1)
    stream_rewind(CONSUMER, offset=head, rebuild=False)
    with pytest.raises(RewindError):
        stream_rewind(CONSUMER, offset=head + 1, rebuild=False)


def test_offset_past_the_end_is_a_form_error(operator_client, head):
    response = operator_client.post(rewind_url(), {"offset": 1_000_000_000_000})
    assert response.status_code == 200
    assert response.context["form"].non_field_errors() == [
        f"offset 1000000000000 is past the end of the log: the newest offset is "
        f"{head}, so the highest offset to rewind to is {head}"
    ]
    consumer = StreamConsumer.objects.get(name=CONSUMER)
    assert (consumer.offset, consumer.rewound_at) == (head, None)


def test_offset_beyond_64_bits_is_a_field_error_not_a_500(operator_client, head):
    response = operator_client.post(rewind_url(), {"offset": str(2**64)})
    assert response.status_code == 200
    assert response.context["form"].errors["offset"]
    assert StreamConsumer.objects.get(name=CONSUMER).rewound_at is None


def test_negative_offset_is_a_field_error(operator_client, head):
    response = operator_client.post(rewind_url(), {"offset": "-1"})
    assert response.status_code == 200
    assert response.context["form"].errors["offset"]


def test_rewind_to_the_newest_offset_through_the_form(operator_client, head):
    response = operator_client.post(rewind_url(), {"offset": head})
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:messaging_streamconsumer_changelist")

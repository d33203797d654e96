"""The admin's Bounded queues page: bounds beside their queue and workers, resizing a
bound for every producer, resuming suspended workers; the dashboard's right only."""

import django_rq
import pytest
from django.contrib.auth.models import User
from django.test import Client
from rq import Queue
from rq.suspension import is_suspended, suspend

from jobs.backpressure import BoundedQueue, bound_resize, buffer_stats
from jobs.bounds import bounds_read
from library.permissions import RQ_DASHBOARD, permission_get

pytestmark = pytest.mark.django_db
PAGE = "/admin/bounded-queues/"


def noop(n: int) -> int:
    return n


@pytest.fixture
def bound(redis_client) -> BoundedQueue:
    queue = Queue("bp-admin", connection=django_rq.get_connection("default"))
    return BoundedQueue(queue, capacity=2, policy="drop_newest", name="bp-admin")


def offer(bounded: BoundedQueue, n: int) -> str:
    return bounded.enqueue(noop, n, job_id=f"job-{n}").outcome


def operator(username: str, *perms: str) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*(permission_get(p) for p in perms))
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_a_full_bound_its_queue_and_suspended_workers(bound):
    assert [offer(bound, n) for n in range(3)] == ["accepted", "accepted", "dropped"]
    suspend(bound.redis)
    page = operator("oncall", RQ_DASHBOARD).get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-bound="bp-admin"' in html
    assert "2 / 2" in html  # waiting of capacity, shown full
    assert "suspended" in html
    assert 'id="resume-workers"' in html
    report = bounds_read(bound.redis)
    assert [b.name for b in report.bounds] == ["bp-admin"]
    assert report.bounds[0].queue == "bp-admin"
    assert report.bounds[0].full
    assert report.bounds[0].stats["dropped"] == 1


def test_a_resize_applies_to_every_producer_from_its_next_offer(bound):
    offer(bound, 0)
    offer(bound, 1)
    client = operator("oncall", RQ_DASHBOARD)
    answer = client.post(f"{PAGE}resize/", {"bound": "bp-admin", "capacity": "4"})
    assert answer.status_code == 302
    assert [offer(bound, n) for n in range(2, 5)] == ["accepted", "accepted", "dropped"]
    assert buffer_stats(bound.redis, "bp-admin")["depth"] == 4
    # Empty: the producers' own capacity again.
    client.post(f"{PAGE}resize/", {"bound": "bp-admin", "capacity": ""})
    assert offer(bound, 5) == "dropped"
    bad = client.post(f"{PAGE}resize/", {"bound": "bp-admin", "capacity": "0"})
    assert bad.status_code == 400
    with pytest.raises(ValueError, match="at least 1"):
        bound_resize(bound.redis, "bp-admin", 0)


def test_resuming_lifts_the_suspension(bound):
    offer(bound, 0)
    suspend(bound.redis)
    client = operator("oncall", RQ_DASHBOARD)
    assert client.post(f"{PAGE}resume-workers/").status_code == 302
    assert not is_suspended(bound.redis)
    assert 'id="resume-workers"' not in client.get(PAGE).content.decode()


def test_the_page_and_its_actions_need_the_dashboards_right(bound):
    offer(bound, 0)
    suspend(bound.redis)
    staff = operator("staff-only")
    assert staff.get(PAGE).status_code == 403
    assert staff.post(f"{PAGE}resume-workers/").status_code == 403
    assert (
        staff.post(f"{PAGE}resize/", {"bound": "bp-admin", "capacity": "9"}).status_code
        == 403
    )
    assert is_suspended(bound.redis)
    assert Client().get(PAGE).status_code == 302  # signed out: to the sign-in page

"""The course's pages as a screen reader and a search engine read them (issue #25).

Without a browser: the rendered HTML carries what assistive technology needs. The
behaviours that need one (focus, outlines, layout shift, axe-core) are in
course/tests/test_lesson_a11y_browser.py and tests/test_accessibility_browser.py.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

from course.labs.registry import LABS
from course.lessons import LESSONS
from course.textbook import lesson_text

pytestmark = pytest.mark.django_db


class _Ids(HTMLParser):
    """Every id of a page, and every element's aria-describedby."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.described: list[tuple[str, list[str]]] = []
        self.elements: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
            self.elements[str(found["id"])] = found
        if found.get("aria-describedby"):
            self.described.append(
                (str(found.get("id")), str(found["aria-describedby"]).split())
            )


def _parsed(page: str) -> _Ids:
    parser = _Ids()
    parser.feed(page)
    return parser


def _text(page: str, element_id: str) -> str:
    """The text of the element with ``element_id`` (a <p> or <div>), tags removed."""
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(p|div)>', page, re.DOTALL)
    assert match, f"no element #{element_id}"
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1))).strip()


@pytest.mark.parametrize("slug", sorted(LABS))
def test_every_lab_field_is_described_by_help_that_is_on_the_page(client, slug):
    page = client.get(f"/course/{slug}/").content.decode()
    parsed = _parsed(page)
    assert parsed.described, "the lab form describes no field"
    for field, ids in parsed.described:
        for described_by in ids:
            assert described_by in parsed.ids, f"#{field} points at #{described_by}"
            if described_by.endswith("_helptext"):
                assert _text(page, described_by), f"#{described_by} is empty"


def test_a_rejected_value_is_marked_invalid_and_its_error_linked(client):
    # No JavaScript: the form posts, the page comes back with the reason.
    answer = client.post("/course/cache-layers/run", {"users": "0"})
    assert answer.status_code == 400
    page = answer.content.decode()
    users = _parsed(page).elements["id_users"]
    assert users.get("aria-invalid") == "true"
    described = str(users.get("aria-describedby")).split()
    assert "id_users_error" in described
    assert "id_users_helptext" in described
    assert "at least 1" in _text(page, "id_users_error")
    # A field that was accepted is not marked.
    assert "aria-invalid" not in _parsed(page).elements["id_requests"]


def test_home_course_and_lessons_describe_themselves(client):
    def description(path: str) -> str:
        page = client.get(path).content.decode()
        found = re.findall(r'<meta name="description" content="([^"]*)">', page)
        assert len(found) == 1, path
        return html.unescape(found[0])

    assert "branches" in description("/")
    assert "twenty-five lessons" in description("/course/")
    lesson = LESSONS[0]
    assert description(f"/course/{lesson.slug}/") == lesson.summary
    assert "Library Lab" in description("/accounts/login/")  # the default


def test_heading_links_are_named_for_a_screen_reader():
    text = lesson_text("cache-layers")
    assert text is not None
    links = re.findall(r'<a class="header-anchor"[^>]*>', text.html)
    assert links
    for link, heading in zip(links, text.toc, strict=True):
        assert f'aria-label="Link to this section: {html.escape(heading.text)}"' in link


def test_the_sse_lesson_names_the_address_the_page_came_from(client):
    page = client.get(
        "/course/server-sent-events/", HTTP_HOST="testserver:8123"
    ).content.decode()
    code = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "curl -N http://testserver:8123/realtime/branches/1/events" in code
    assert ":8000" not in code
    assert "{{site}}" not in code
    assert "librarylabsiteaddress" not in code


@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_no_lesson_names_a_host_of_its_own(slug):
    text = lesson_text(slug)
    assert text is not None
    assert "localhost" not in text.html
    assert ":8000" not in text.html


def test_only_the_run_state_is_a_live_region(client):
    page = client.get("/course/cache-layers/").content.decode()
    results = re.search(r'<section class="card lab-results"[^>]*>', page)
    assert results
    assert "aria-live" not in results.group(0)
    assert re.search(r'<span class="badge" data-state role="status">', page)
    explained = re.search(r'<div class="explained"[^>]*>', page)
    assert explained
    assert "aria-live" not in explained.group(0)


def test_the_answer_button_has_both_labels_for_the_css_to_choose(client):
    page = client.get("/course/cache-layers/").content.decode()
    questions = re.findall(r'<details class="question".*?</details>', page, re.DOTALL)
    found = [re.search(r"<summary>.*?</summary>", q, re.DOTALL) for q in questions]
    summaries = [match.group(0) for match in found if match]
    assert summaries
    for summary in summaries:
        assert '<span class="reveal-show">Show the answer</span>' in summary
        assert '<span class="reveal-hide">Hide the answer</span>' in summary


def test_the_page_knows_its_reading_minutes_for_the_read_mark(client):
    text = lesson_text("cache-layers")
    assert text is not None
    page = client.get("/course/cache-layers/").content.decode()
    config = re.search(
        r'<script type="application/json" id="progress-config">(.*?)<', page
    )
    assert config
    assert f'"minutes": {text.reading_minutes}' in config.group(1)


def test_admin_pages_have_the_site_icon(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert '<link rel="icon" href="data:image/svg+xml' in page
    assert "css/admin" in page

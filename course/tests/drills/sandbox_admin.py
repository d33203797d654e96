"""A client of a drill's sandbox site, acting in its admin as the learner would.

It signs in with the drill's one-time link and sends the admin's own forms over
real HTTP to the sandbox's daphne: the hidden fields of a confirmation page are
read from the page itself, the CSRF token from the sandbox's own cookie.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import httpx


@dataclass
class Form:
    action: str
    ident: str
    fields: list[tuple[str, str]] = field(default_factory=list)


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(Form(found.get("action", ""), found.get("id", "")))
        elif tag == "input" and self.forms and found.get("name"):
            kind = found.get("type", "text")
            if kind in ("hidden", "text", "number") or (
                kind == "checkbox" and "checked" in found
            ):
                self.forms[-1].fields.append((found["name"], found.get("value", "")))


def forms_of(html: str) -> list[Form]:
    reader = _Forms()
    reader.feed(html)
    return reader.forms


class SandboxAdmin:
    """The learner's browser tab on the sandbox's site."""

    def __init__(self, base: str) -> None:
        self.base = base
        # Generous: the sandbox's processes run niced, and answer late under load.
        self.http = httpx.Client(base_url=base, timeout=180.0)

    def close(self) -> None:
        self.http.close()

    def sign_in(self, link: str) -> httpx.Response:
        answer = self.http.get(link.removeprefix(self.base))
        assert answer.status_code == 302, answer.status_code
        return answer

    def csrf(self) -> str:
        for name, value in self.http.cookies.items():
            if name.endswith("csrftoken"):
                return value
        page = self.get("/admin/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert match, "no CSRF token on the admin's pages"
        return match.group(1)

    def get(self, path: str, **params: Any) -> str:
        answer = self.http.get(path, params=params) if params else self.http.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        return answer.text

    def post(self, path: str, data: list[tuple[str, str]]) -> httpx.Response:
        fields = [(k, v) for k, v in data if k != "csrfmiddlewaretoken"]
        fields.append(("csrfmiddlewaretoken", self.csrf()))
        return self.http.post(
            path, data=dict(fields) if _unique(fields) else _multi(fields)
        )

    def confirm(self, page_path: str, form_id: str, **extra: str) -> httpx.Response:
        """Open a confirmation page and send its form (with ``extra`` fields)."""
        page = self.get(page_path)
        form = next(f for f in forms_of(page) if f.ident == form_id)
        data = [(k, v) for k, v in form.fields if k not in extra]
        data += list(extra.items())
        return self.post(form.action or page_path, data)

    def action(
        self, changelist: str, action: str, ids: Sequence[object], **extra: str
    ) -> httpx.Response:
        """Run a changelist action on ``ids``: its confirmation page, then "yes"."""
        data = [("action", action), *(("_selected_action", str(i)) for i in ids)]
        first = self.post(changelist, data)
        assert first.status_code in (200, 302), first.status_code
        if first.status_code == 302:
            return first
        form = forms_of(first.text)
        chosen = next(f for f in form if any(k == "post" for k, _ in f.fields))
        data = [(k, v) for k, v in chosen.fields if k not in extra]
        data += list(extra.items())
        return self.post(chosen.action or changelist, data)


def _unique(fields: list[tuple[str, str]]) -> bool:
    names = [k for k, _ in fields]
    return len(names) == len(set(names))


def _multi(fields: list[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, value in fields:
        grouped.setdefault(name, []).append(value)
    return grouped

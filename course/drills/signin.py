"""The one-time sign-in of a drill's operator account, on the sandbox's own site.

The learner's drill page holds a random token (in the learner's session, on the
real site); the sandbox's Redis holds only its digest, with the account it signs in
and the admin page to land on. Following the link on the sandbox's daphne
(``/course/drills/enter/<token>/``) takes the digest out of Redis (GETDEL: one use)
and signs the account in. A used, unknown or expired token signs nobody in.

The route exists on every site, and answers 404 outside a drill's sandbox: on the
operator's own site no token can ever sign anyone in.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Final, cast

import django_rq
from django.contrib.auth import get_user_model, login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from redis import Redis

from course.sandbox import SANDBOX_ENV

PASS_PREFIX: Final = "drill:pass:"
PASS_TTL_S: Final = 24 * 60 * 60  # outlives any drill (its sandbox goes first)
BACKEND: Final = "django.contrib.auth.backends.ModelBackend"


def pass_digest(token: str) -> str:
    return hashlib.sha256(f"drill-pass:{token}".encode()).hexdigest()


def _redis() -> Redis:
    connection: Redis = django_rq.get_connection("default")
    return connection


def pass_store(*, digest: str, username: str, next_path: str) -> None:
    """Let the token of ``digest`` sign ``username`` in once, landing on ``next``."""
    entry = json.dumps({"user": username, "next": next_path})
    _redis().set(f"{PASS_PREFIX}{digest}", entry, ex=PASS_TTL_S)


def _pass_take(token: str) -> dict[str, str] | None:
    raw = cast(bytes | None, _redis().getdel(f"{PASS_PREFIX}{pass_digest(token)}"))
    if raw is None:
        return None
    entry: dict[str, str] = json.loads(raw)
    return entry


def _safe_next(path: str) -> str:
    # Only the sandbox's admin: a stored value, but never an address elsewhere.
    return path if path.startswith("/admin/") and "//" not in path else "/admin/"


@never_cache
@require_GET
def drill_enter(request: HttpRequest, token: str) -> HttpResponse:
    """Sign the drill's operator in with a one-time token; land on the admin."""
    if not os.environ.get(SANDBOX_ENV) or len(token) > 100:
        raise Http404("no drill here")
    entry = _pass_take(token)
    user = None
    if entry is not None:
        user = get_user_model().objects.filter(username=entry["user"]).first()
    if entry is None or user is None:
        return render(request, "course/drills/enter_used.html", status=410)
    login(request, user, backend=BACKEND)
    return HttpResponseRedirect(_safe_next(entry.get("next", "/admin/")))

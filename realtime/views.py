"""Pages whose content arrives over WebSocket."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from library.models import Branch


def branch_live(request: HttpRequest, branch_id: int) -> HttpResponse:
    """Render the live shelf page; the counts come over the socket."""
    branch = get_object_or_404(Branch, pk=branch_id)
    return render(request, "realtime/live.html", {"branch": branch})

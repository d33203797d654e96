"""Template helpers for the messaging admin: the index overview and short durations.

The overview is a tag rather than context from a custom ``AdminSite``, so the stock
site (and its URLs in ``config``) stays as it is.
"""

from __future__ import annotations

import datetime

from django import template

from messaging.selectors import MessagingOverview, messaging_overview

register = template.Library()


@register.simple_tag
def messaging_admin_overview() -> MessagingOverview:
    """Return open dead letters, per-subscription counts and lag, measured now."""
    return messaging_overview()


@register.filter
def short_duration(value: datetime.timedelta | None) -> str:
    """Format a duration as its two largest units, e.g. ``2 h 5 min``; ``—`` if none."""
    if value is None:
        return "—"
    seconds = max(int(value.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"

"""``{{ lab|explore_config|json_script:"explore-config" }}``: the explorable lab's
controls and endpoint for ``static/js/explore.js`` (``course.explore``)."""

from __future__ import annotations

from typing import Any

from django import template

from course.explore import explore_config as _explore_config
from course.labs.harness.base import Lab

register = template.Library()


@register.filter
def explore_config(lab: Lab[Any]) -> dict[str, object]:
    return _explore_config(lab)

"""``{% drills_for lesson.slug as drills %}``: the operator drills a lesson leads to."""

from __future__ import annotations

from django import template

from course.drills.catalogue import DRILLS, Drill

register = template.Library()


@register.simple_tag
def drills_for(slug: str) -> list[Drill]:
    """Return the drills that list the lesson ``slug`` among their lessons."""
    return [drill for drill in DRILLS if slug in drill.lessons]

"""The labs, keyed by lesson slug: each lesson's lab found by name, checked at import.

Every lesson has a lab, in the package named after its slug (``-`` becomes ``_``):
``hot-key-and-stampede-effect`` is ``course/labs/hot_key_and_stampede_effect/``, whose
``__init__`` exposes ``LAB = Lab(...)``. Adding a lesson without its lab, or a lab
whose slug is not its package's lesson, fails here, at import.
"""

from __future__ import annotations

import importlib
from typing import Any

from course.labs.harness.base import Lab, LabError
from course.lessons import LESSONS


def package_name(slug: str) -> str:
    """Return the module that holds the lab of the lesson ``slug``."""
    return f"course.labs.{slug.replace('-', '_')}"


def lab_load(slug: str) -> Lab[Any]:
    name = package_name(slug)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as missing:
        if missing.name != name:
            raise  # the lab exists and one of its own imports is broken
        raise RuntimeError(f"lesson {slug!r} has no lab: write {name}") from None
    lab = getattr(module, "LAB", None)
    if not isinstance(lab, Lab):
        raise RuntimeError(f"{name} defines no LAB = Lab(...)")
    if lab.slug != slug:
        raise RuntimeError(f"{name} holds the lab {lab.slug!r}, not {slug!r}")
    return lab


LABS: dict[str, Lab[Any]] = {lesson.slug: lab_load(lesson.slug) for lesson in LESSONS}


class UnknownLab(LabError):
    pass


def lab_get(slug: str) -> Lab[Any]:
    """Return the lab for ``slug``; raise UnknownLab with a one-line reason."""
    try:
        return LABS[slug]
    except KeyError:
        known = ", ".join(sorted(LABS))
        raise UnknownLab(f"no lab named {slug!r} (labs: {known})") from None

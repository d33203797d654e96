"""The parameters of the http-caching lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``HttpCachingParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = ()


@dataclass(frozen=True)
class HttpCachingParams(LabParams):
    """The lab's parameters, one typed field each."""

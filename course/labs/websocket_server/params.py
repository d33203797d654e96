"""The parameters of the websocket-server lab.

``PARAMS`` are what the lesson form and ``lab --set`` take; the model and live parts
read them as ``WebsocketServerParams``, one typed field each.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.labs.harness.base import LabParams, Param

PARAMS: tuple[Param, ...] = ()


@dataclass(frozen=True)
class WebsocketServerParams(LabParams):
    """The lab's parameters, one typed field each."""

"""Prometheus exposition: the sources apps register, rendered on a registry of its own.

Each app registers a function yielding metric families (``exposition_register``, from
its ``AppConfig.ready``); ``exposition_render`` builds a fresh ``CollectorRegistry``
per scrape with one collector that calls them all. Nothing touches
``prometheus_client``'s process-wide default registry, so no state accumulates
between scrapes and the values are read at scrape time from their sources of truth
(Redis, the database, rq), the same for every process that answers.

A source that fails raises: a scrape either shows every family or fails as a whole
(the view answers 503), never a partial page that would read as zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

__all__ = ["PREFIX", "Source", "exposition_register", "exposition_render"]

# Every family of this system starts with it, apart from django-rq's own view.
PREFIX = "library_"

Source = Callable[[], Iterable[Metric]]
_sources: dict[str, Source] = {}


def exposition_register(name: str, source: Source) -> None:
    """Register ``source`` under ``name`` (registering a name again replaces it)."""
    _sources[name] = source


class _Sources:
    """The one collector of a scrape: every registered source, in order."""

    def collect(self) -> Iterator[Metric]:
        for source in list(_sources.values()):
            yield from source()


def exposition_render(accept: str = "") -> tuple[bytes, str]:
    """Return the exposition body and its content type for an ``Accept`` header."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Sources())
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type

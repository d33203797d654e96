"""The system check of the messaging registry: every declaration resolves at start-up.

Registration is dynamic (each app binds its handlers and adds its types and
subscriptions from ``ready()``), so what the registry used to refuse at import is
refused here, once every app is ready: ``manage.py check``, ``migrate``, the workers
and the development server all run it before doing anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error

from messaging import registry


def _error(id_: int, text: str, hint: str) -> Error:
    return Error(text, hint=hint, id=f"messaging.E{id_:03d}")


def _subscription_errors() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, spec in registry.SUBSCRIPTIONS.items():
        if name not in registry.HANDLERS:
            errors.append(
                _error(
                    1,
                    f"subscription {name!r} has no handler",
                    f"decorate its effect with @subscription_handler({name!r}) in a "
                    "module the owning app's ready() imports",
                )
            )
        for flag, table, decorator in (
            (spec.after_batch, registry.AFTER_BATCH, "after_batch_handler"),
            (spec.outside, registry.OUTSIDE, "outside_handler"),
        ):
            if flag and name not in table:
                errors.append(
                    _error(
                        2,
                        f"subscription {name!r} declares a {decorator} step that is "
                        "not registered",
                        f"decorate it with @{decorator}({name!r})",
                    )
                )
        unknown = sorted(t for t in spec.accepts if t not in registry.MESSAGE_TYPES)
        if unknown:
            errors.append(
                _error(
                    5,
                    f"subscription {name!r} accepts unregistered types {unknown}",
                    "register them with message_type_register()",
                )
            )
    return errors


def _stream_errors() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name in registry.STREAM_CONSUMERS:
        for table, decorator in (
            (registry.STREAM_HANDLERS, "stream_handler"),
            (registry.STREAM_RESETS, "stream_reset_handler"),
        ):
            if name not in table:
                errors.append(
                    _error(
                        3,
                        f"stream consumer {name!r} has no {decorator}",
                        f"decorate it with @{decorator}({name!r})",
                    )
                )
    return errors


def _orphan_errors() -> list[CheckMessage]:
    """Handlers bound to a name nothing declares: a typo, or a removed subscription."""
    errors: list[CheckMessage] = []
    for table, declared in (
        (registry.HANDLERS, registry.SUBSCRIPTIONS),
        (registry.AFTER_BATCH, registry.SUBSCRIPTIONS),
        (registry.OUTSIDE, registry.SUBSCRIPTIONS),
        (registry.STREAM_HANDLERS, registry.STREAM_CONSUMERS),
        (registry.STREAM_RESETS, registry.STREAM_CONSUMERS),
    ):
        for name in sorted(set(table) - set(declared)):
            errors.append(
                _error(
                    6,
                    f"a handler is bound to {name!r}, which is not declared",
                    "declare it with subscription_register() (or fix the name)",
                )
            )
    return errors


def _type_errors() -> list[CheckMessage]:
    """A message type no subscription would ever see is published into the void."""
    unhandled = sorted(
        t for t in registry.MESSAGE_TYPES if not registry.subscriptions_for(t)
    )
    if not unhandled:
        return []
    return [
        _error(
            4,
            f"message types without a subscription: {unhandled}",
            "add the type to some subscription's accepts",
        )
    ]


def registry_check(
    *,
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Return an error per declaration of the registry that does not resolve."""
    return [
        *_subscription_errors(),
        *_stream_errors(),
        *_orphan_errors(),
        *_type_errors(),
    ]

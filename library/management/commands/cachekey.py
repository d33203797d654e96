"""Print the cache key the application uses for a question (operator tool).

    manage.py cachekey --namespace library --operation search --tenant branch-2 \
        --generation 4 --criteria title=Sand --criteria author=Borges

The key comes from ``library.cache.keys.cache_key``, the same function the views call,
so what this prints is what to look for in Redis. Any bad input — a missing part, a
criterion without ``=``, a name given twice, a negative generation — is one line on
stderr and exit status 2.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from library.cache.keys import CacheKeyError, cache_key


class Command(BaseCommand):
    help = "Print the cache key for a namespace, tenant, operation and criteria."
    # Pure string work: no database, no checks, nothing on stdout but the key.
    requires_system_checks: list[str] = []

    def create_parser(
        self, prog_name: str, subcommand: str, **kwargs: Any
    ) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # argparse prints its usage block before the error; one line is the contract.
        parser.error = self._fail  # type: ignore[method-assign]
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--namespace", required=True)
        parser.add_argument("--operation", required=True)
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--generation", type=int, default=1)
        parser.add_argument("--schema-version", type=int, default=1)
        parser.add_argument(
            "--criteria",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="one criterion (repeatable); an empty VALUE is left out of the key",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key = cache_key(
                namespace=options["namespace"],
                operation=options["operation"],
                tenant=options["tenant"],
                generation=options["generation"],
                schema_version=options["schema_version"],
                criteria=_parse_criteria(options["criteria"]),
            )
        except CacheKeyError as error:
            self._fail(str(error))
        self.stdout.write(key)

    def _fail(self, message: str) -> NoReturn:
        self.stderr.write(f"cachekey: {message}")
        sys.exit(2)


def _parse_criteria(items: list[str]) -> dict[str, str]:
    criteria: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CacheKeyError(f"--criteria needs NAME=VALUE, got {item!r}")
        if name in criteria:
            # Silently keeping one of the two would print a key for another question.
            raise CacheKeyError(f"criterion {name!r} given twice")
        criteria[name] = value
    return criteria

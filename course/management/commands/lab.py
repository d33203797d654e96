"""Run a lesson's lab from the command line (contract: docs/labs.md).

    manage.py lab                                   list the labs
    manage.py lab SLUG [--set NAME=VALUE ...] [--live] [--json]
    manage.py lab SLUG --params                     list the lab's parameters

Every user error (unknown lab, unknown parameter, bad value, no live part) is one line
on stderr and exit status 2; ``--json`` keeps stdout to exactly one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from course.labs.harness.base import Cell, LabError, LabResult, Table
from course.labs.registry import LABS, lab_get
from course.sandbox import lab_run_sandboxed


class Command(BaseCommand):
    help = "List the course's labs or run one and print its tables."
    # The model part needs no database or URL wiring; skipping the checks keeps the
    # command quick and keeps stdout/stderr free of anything but the lab's answer.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", nargs="?", help="the lesson's slug")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            dest="overrides",
            help="override a parameter (repeatable; lists are comma-separated)",
        )
        parser.add_argument("--live", action="store_true", help="run the live part")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--params", action="store_true", help="list the lab's parameters"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str | None = options["slug"]
        if slug is None:
            self._list(as_json=options["json"])
            return
        try:
            lab = lab_get(slug)
            if options["params"]:
                self._params(slug)
                return
            overrides = _parse_overrides(options["overrides"])
            params = lab.resolve(overrides)
            result = lab_run_sandboxed(lab, params, live=options["live"])
        except LabError as error:
            self._fail(str(error))
        if options["json"]:
            self.stdout.write(json.dumps(result, ensure_ascii=False))
        else:
            self.stdout.write(render_text(result, title=lab.title))

    def _fail(self, message: str) -> NoReturn:
        # One line, no traceback: the reason is what the user needs.
        self.stderr.write(f"lab: {message}")
        sys.exit(2)

    def _list(self, *, as_json: bool) -> None:
        if as_json:
            payload = {
                "labs": [
                    {
                        "slug": lab.slug,
                        "title": lab.title,
                        "model": True,
                        "live": True,
                    }
                    for lab in LABS.values()
                ]
            }
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        rows: list[list[Cell]] = [
            [lab.slug, lab.title, "yes", "yes"] for lab in LABS.values()
        ]
        self.stdout.write(
            format_table({"columns": ["lab", "title", "model", "live"], "rows": rows})
        )

    def _params(self, slug: str) -> None:
        lab = lab_get(slug)
        rows: list[list[Cell]] = [
            [p.name, p.text(p.default), p.describe_range(), p.help] for p in lab.params
        ]
        self.stdout.write(
            format_table(
                {
                    "columns": ["parameter", "default", "accepts", "meaning"],
                    "rows": rows,
                }
            )
        )


def _parse_overrides(items: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise LabError(f"--set needs NAME=VALUE, got {item!r}")
        overrides[name.strip()] = value
    return overrides


def _cell_text(cell: Cell) -> str:
    if cell is None:
        return "null"
    return str(cell)


def format_table(data: Table) -> str:
    """Return the table as aligned text: numbers right-aligned, text left-aligned."""
    columns = data["columns"]
    texts = [[_cell_text(cell) for cell in row] for row in data["rows"]]
    widths = [
        max([len(col)] + [len(row[i]) for row in texts])
        for i, col in enumerate(columns)
    ]
    numeric = [
        all(isinstance(row[i], int | float) for row in data["rows"]) and data["rows"]
        for i in range(len(columns))
    ]
    header = "  ".join(
        col.rjust(w) if num else col.ljust(w)
        for col, w, num in zip(columns, widths, numeric, strict=True)
    )
    lines = [header.rstrip()]
    for row in texts:
        line = "  ".join(
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        )
        lines.append(line.rstrip())
    return "\n".join(lines)


def render_text(result: LabResult, *, title: str) -> str:
    params = " ".join(
        f"{name}={(','.join(map(str, v)) or 'none') if isinstance(v, list) else v}"
        for name, v in result["params"].items()
    )
    parts = [f"{result['lesson']} — {title}", f"params: {params}" if params else ""]
    for name, data in result["tables"].items():
        parts.append(f"\n[{name}]\n{format_table(data)}")
    return "\n".join(part for part in parts if part) + "\n"

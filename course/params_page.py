"""``course/PARAMETERS.md``, written from the lab registry (``manage.py lab_params``).

Each lab gets a section: one row per ``Param`` (kind, default, the values it accepts,
its help text, which says what 0 or an empty list means where that matters), then
the lab's note from ``course.params_notes`` (what is still refused and why, what
only the model runs). Everything but the notes comes from the ``Param`` list, so the
page cannot drift from the registry; a test compares the file with this output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from course.labs.harness.base import Param

PAGE_PATH: Final = Path(__file__).resolve().parent / "PARAMETERS.md"

HEADER: Final = """\
# Lab parameters

<!-- Written by `python manage.py lab_params --write` from the lab registry
     (course/labs/registry.py) and course/params_notes.py: edit those, not this
     file. -->

Every lab's parameters: kind, default and the values it accepts (`python manage.py
lab SLUG --params` prints the same from the registry, in a shorter form). A value
outside them is refused with one line naming the parameter (exit status 2 on the
command line, a field error on the lesson page).

- A list parameter takes comma-separated whole numbers (`--set capacities=4,8,16`).
  Where "0 to N values" is written, `none` (or an empty `--set name=`) is the empty
  list: the rows that list would produce are simply not there. On the lesson page an
  empty field keeps the default, so type `none` there.
- A capacity of 0 is a cache that keeps nothing: the layer is off and every request
  passes through it. A count of 0 requests / jobs gives empty tables (a share or a
  ratio of nothing prints as `null`, as the course's `NaN`).
- A few boundaries run in the model only; the live part then refuses them in one
  line starting with the parameter's name (listed under each lab's table).
"""

TABLE_HEAD: Final = (
    "| parameter | kind | default | accepts | meaning |\n|---|---|---|---|---|"
)
NO_PARAMETERS: Final = "No parameters: the experiment is fixed."
_KIND_WORDS: Final = {
    "int": ("whole number", "whole numbers"),
    "float": ("number", "numbers"),
    "int_list": ("whole number", "whole numbers"),
    "str": ("text", "text"),
}


def number_text(value: float) -> str:
    """Return a bound as a learner types it: ``5``, not ``5.0``; ``0.15`` as is."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def range_text(param: Param) -> str:
    """Return the bounds of a number: ``0 … 200000``, ``> 0 and ≤ 10``, ``≥ 1``."""
    low, high = param.minimum, param.maximum
    if low is not None and high is not None and not param.exclusive_minimum:
        return f"{number_text(low)} … {number_text(high)}"
    bits = []
    if low is not None:
        sign = ">" if param.exclusive_minimum else "≥"
        bits.append(f"{sign} {number_text(low)}")
    if high is not None:
        bits.append(f"≤ {number_text(high)}")
    return " and ".join(bits)


def accepts_text(param: Param) -> str:
    """Return the values ``param`` accepts, in words."""
    if param.kind == "str":
        return f"text, 1 to {param.max_length} characters"
    single, plural = _KIND_WORDS[param.kind]
    bounds = range_text(param)
    if param.kind != "int_list":
        return f"{single} {bounds}".strip()
    count = f"{param.min_items} to {param.max_items} values"
    text = f"{plural} {bounds}".strip() + f", {count}"
    if param.min_items == 0:
        text += " (`none` or empty: no value)"
    return text


def param_row(param: Param) -> str:
    """Return ``param``'s row of its lab's table."""
    cells = (
        f"`{param.name}`",
        param.kind,
        f"`{param.text(param.default)}`",
        accepts_text(param),
        param.help,
    )
    return "| " + " | ".join(cells) + " |"


def lab_section(slug: str, params: Sequence[Param], note: str) -> str:
    """Return the section of one lab: its heading, its table and its note."""
    parts = [f"### `{slug}`"]
    if params:
        parts.append("\n".join([TABLE_HEAD, *(param_row(p) for p in params)]))
    else:
        parts.append(NO_PARAMETERS)
    if note:
        parts.append(note)
    return "\n\n".join(parts)


def parameters_markdown(
    labs: Mapping[str, Sequence[Param]], notes: Mapping[str, str]
) -> str:
    """Return the whole page for ``labs`` (slug to parameters), in their order.

    Raise ValueError for a note whose slug is not a lab: a renamed lab must take
    its note along, not lose it silently.
    """
    unknown = sorted(set(notes) - set(labs))
    if unknown:
        raise ValueError(f"notes for labs the registry does not have: {unknown}")
    sections = [
        lab_section(slug, params, notes.get(slug, "")) for slug, params in labs.items()
    ]
    return "\n\n".join([HEADER.rstrip("\n"), *sections]) + "\n"

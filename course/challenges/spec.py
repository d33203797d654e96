"""A lesson's challenges as its author wrote them (``[[challenges]]`` in the TOML).

See ``course/AUTHORING.md``, "Challenges". Reading is forgiving: what does not follow
the format is kept as a problem of the challenge (``problems``), which
``lesson_check`` prints, and the page leaves that challenge out.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Literal

from course.challenges.expr import ExprError, Parsed, parse
from course.textbook import CONTENT_DIR

Kind = Literal["params", "number"]
Direction = Literal["min", "max", ""]
# The live part's tables are named after the model's, with this prefix.
LIVE_PREFIX = "live_"
ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,58}$")
_FRONT = re.compile(r"\A\+\+\+\n(.*?)^\+\+\+\n", re.DOTALL | re.MULTILINE)
# The most model runs a "minimise"/"maximise" search may cost (all of them cached).
SEARCH_LIMIT = 240


@dataclass(frozen=True)
class Challenge:
    """One challenge of a lesson, its texts still holding their placeholders."""

    slug: str
    id: str
    title: str
    goal: str
    kind: Kind
    hints: tuple[str, ...] = ()
    # Shown with a wrong answer; placeholders read from the run that was checked.
    explain: str = ""
    # Shown once solved: why the answer works.
    debrief: str = ""
    lessons: tuple[str, ...] = ()
    # The settings of this challenge that differ from the lab's defaults, as typed.
    settings: dict[str, str] = field(default_factory=dict)
    # params: the parameters the learner sets, the conditions, what is optimised.
    change: tuple[str, ...] = ()
    require: tuple[Parsed, ...] = ()
    objective: Parsed | None = None
    direction: Direction = ""
    search: dict[str, tuple[str, ...]] = field(default_factory=dict)
    solution: dict[str, str] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)
    # number: the figure the answer is compared with, and how closely.
    value: Parsed | None = None
    tolerance: float = 0.0
    tolerance_pct: float = 0.0
    unit: str = ""
    answer: float | None = None
    wrong_answer: float | None = None
    # params: what a live run of a solved answer must show (signed-in learners), and
    # the text shown with its figures; placeholders read that run's tables.
    live: tuple[Parsed, ...] = ()
    live_explain: str = ""
    problems: tuple[str, ...] = ()

    @property
    def anchor(self) -> str:
        return f"challenge-{self.id}"

    @property
    def usable(self) -> bool:
        return not self.problems

    @property
    def live_checked(self) -> bool:
        """Whether a solved answer can be checked on the live system."""
        return self.kind == "params" and bool(self.live)


def value_text(value: object) -> str:
    """Return a TOML value as a learner would type it into the form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value_text(item) for item in value) or "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _text(raw: object) -> str:
    return raw.strip() if isinstance(raw, str) else ""


def _texts(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(_text(item) for item in raw if _text(item))


def _values(raw: object, what: str, problems: list[str]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{what} must be a table of parameter = value")
        return {}
    return {str(name): value_text(value) for name, value in raw.items()}


def _number(raw: object, what: str, problems: list[str]) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        problems.append(f"{what} must be a number")
        return None
    return float(raw)


def _parsed(raw: object, what: str, problems: list[str]) -> Parsed | None:
    text = _text(raw)
    if not text:
        return None
    try:
        return parse(text)
    except ExprError as error:
        problems.append(f"{what}: {error}")
        return None


def _conditions(raw: object, what: str, problems: list[str]) -> list[Parsed]:
    found: list[Parsed] = []
    for index, condition in enumerate(_texts(raw), start=1):
        parsed = _parsed(condition, f"{what} {index}", problems)
        if parsed is not None:
            found.append(parsed)
    return found


def _search(raw: object, problems: list[str]) -> dict[str, tuple[str, ...]]:
    """``{name = [low, high]}`` (whole numbers, inclusive) or ``{name = [v, ...]}``
    with more than two values or any that is not whole: the candidates, as text."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append("search must be a table of parameter = range or values")
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for name, spec in raw.items():
        if (
            isinstance(spec, list)
            and len(spec) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in spec)
        ):
            low, high = spec
            if low > high:
                problems.append(f"search {name}: {low} is above {high}")
            found[str(name)] = tuple(str(v) for v in range(low, high + 1))
        elif isinstance(spec, list) and spec:
            found[str(name)] = tuple(value_text(v) for v in spec)
        else:
            problems.append(f"search {name}: give [low, high] or a list of values")
    return found


def challenge_read(slug: str, raw: dict[str, Any], number: int) -> Challenge:
    """Read one ``[[challenges]]`` entry; what is wrong goes into ``problems``."""
    problems: list[str] = []
    cid = _text(raw.get("id"))
    if not ID.match(cid):
        problems.append(
            f"challenge {number}: id {cid!r} must be 2-59 of a-z, 0-9 and -"
        )
        cid = cid or f"challenge-{number}"
    kind_raw = _text(raw.get("kind"))
    kind: Kind = "number" if kind_raw == "number" else "params"
    if kind_raw not in ("params", "number"):
        problems.append(f'kind {kind_raw!r}: give "params" or "number"')
    for name in ("title", "goal"):
        if not _text(raw.get(name)):
            problems.append(f"no {name}")
    hints = _texts(raw.get("hints"))
    if not 2 <= len(hints) <= 3:
        problems.append(f"{len(hints)} hints; give two or three")
    minimise, maximise = raw.get("minimise"), raw.get("maximise")
    if minimise is not None and maximise is not None:
        problems.append("give minimise or maximise, not both")
    direction: Direction = (
        "min" if minimise is not None else "max" if maximise is not None else ""
    )
    require = _conditions(raw.get("require"), "require", problems)
    live = _conditions(raw.get("live"), "live", problems)
    challenge = Challenge(
        slug=slug,
        id=cid,
        title=_text(raw.get("title")),
        goal=_text(raw.get("goal")),
        kind=kind,
        hints=hints,
        explain=_text(raw.get("explain")),
        debrief=_text(raw.get("debrief")),
        lessons=_texts(raw.get("lessons")),
        settings=_values(raw.get("set"), "set", problems),
        change=_texts(raw.get("change")),
        require=tuple(require),
        objective=_parsed(minimise or maximise, "minimise/maximise", problems),
        direction=direction,
        search=_search(raw.get("search"), problems),
        solution=_values(raw.get("solution"), "solution", problems),
        wrong=_values(raw.get("wrong"), "wrong", problems) if kind == "params" else {},
        value=_parsed(raw.get("value"), "value", problems),
        tolerance=_number(raw.get("tolerance"), "tolerance", problems) or 0.0,
        tolerance_pct=_number(raw.get("tolerance_pct"), "tolerance_pct", problems)
        or 0.0,
        unit=_text(raw.get("unit")),
        answer=_number(raw.get("answer"), "answer", problems),
        wrong_answer=_number(raw.get("wrong"), "wrong", problems)
        if kind == "number"
        else None,
        live=tuple(live),
        live_explain=_text(raw.get("live_explain")),
    )
    problems += _shape(challenge, raw)
    return _with_problems(challenge, problems)


def _with_problems(challenge: Challenge, problems: list[str]) -> Challenge:
    if not problems:
        return challenge
    prefix = f"[[challenges]] {challenge.id}: "
    added = tuple(prefix + problem for problem in problems)
    return replace(challenge, problems=challenge.problems + added)


def _shape(challenge: Challenge, raw: dict[str, Any]) -> list[str]:
    """What each kind needs and must not have."""
    problems: list[str] = []
    if challenge.kind == "params":
        if not challenge.change:
            problems.append("change names no parameter the learner sets")
        if not challenge.require:
            problems.append("require holds no condition")
        if not challenge.solution:
            problems.append("no solution = {...}: a reference answer that passes")
        if not challenge.wrong:
            problems.append("no wrong = {...}: an answer that must fail")
        for name in ("value", "answer", "tolerance", "tolerance_pct"):
            if name in raw:
                problems.append(f'{name} is for kind = "number"')
        if challenge.direction and not challenge.search:
            problems.append("minimise/maximise needs search = {...}")
        problems += _live_shape(challenge, raw)
    else:
        if challenge.value is None:
            problems.append('no value = "...": the figure the answer is checked on')
        if challenge.answer is None:
            problems.append("no answer = ...: the reference answer")
        if challenge.wrong_answer is None:
            problems.append("no wrong = ...: a number that must be refused")
        for name in (
            "change",
            "require",
            "minimise",
            "maximise",
            "search",
            "live",
            "live_explain",
        ):
            if name in raw:
                problems.append(f'{name} is for kind = "params"')
    return problems


def _live_shape(challenge: Challenge, raw: dict[str, Any]) -> list[str]:
    """A live condition reads the live run: it names at least one ``live_`` table
    (one on the model's tables alone was proven already by ``require``)."""
    problems = [
        f"live {index}: {condition.source!r} names no {LIVE_PREFIX}… table; "
        "a live condition reads what the live part measured"
        for index, condition in enumerate(challenge.live, start=1)
        if not any(cell.table.startswith(LIVE_PREFIX) for cell in condition.cells)
    ]
    if "live_explain" in raw and not challenge.live:
        problems.append("live_explain without live = [...]: nothing to explain")
    return problems


def _meta(text: str) -> dict[str, Any]:
    match = _FRONT.match(text)
    if match is None:
        return {}
    try:
        return tomllib.loads(match.group(1))
    except tomllib.TOMLDecodeError:
        return {}  # the lesson's own check reports it


@lru_cache(maxsize=64)
def _cached(slug: str, mtime_ns: int) -> tuple[Challenge, ...]:
    text = (CONTENT_DIR / f"{slug}.md").read_text(encoding="utf-8")
    raw = _meta(text).get("challenges", [])
    if not isinstance(raw, list):
        return ()
    entries = [entry for entry in raw if isinstance(entry, dict)]
    found = [challenge_read(slug, entry, n) for n, entry in enumerate(entries, 1)]
    seen: set[str] = set()
    checked = []
    for challenge in found:
        if challenge.id in seen:
            challenge = _with_problems(challenge, ["the id is used twice"])
        seen.add(challenge.id)
        checked.append(challenge)
    return tuple(checked)


def lesson_mtime(slug: str) -> int:
    """Return when the lesson's file last changed (0: there is none)."""
    try:
        return (CONTENT_DIR / f"{slug}.md").stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def lesson_challenges(slug: str) -> tuple[Challenge, ...]:
    """Return every challenge of the lesson, in the file's order (() if none)."""
    mtime = lesson_mtime(slug)
    return _cached(slug, mtime) if mtime else ()


def challenge_get(slug: str, challenge_id: str) -> Challenge | None:
    """Return the lesson's usable challenge ``challenge_id``, or None."""
    for challenge in lesson_challenges(slug):
        if challenge.id == challenge_id and challenge.usable:
            return challenge
    return None


def challenge_ids(slug: str) -> tuple[str, ...]:
    """Return the ids of the lesson's usable challenges (the index counts them)."""
    return tuple(c.id for c in lesson_challenges(slug) if c.usable)

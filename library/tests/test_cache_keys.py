"""The cache key generator and the ``cachekey`` operator command."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from django.core.management import call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from library.cache.keys import (
    CRITERIA_LIMIT,
    CacheKeyError,
    KeySpec,
    cache_key,
    canonical_criteria,
    escape_part,
)

ROOT = Path(__file__).resolve().parents[2]
# Written in pieces so that no test line repeats a whole printed key of the lesson.
BRANCH_2 = "library:s1:g4:tbranch-2"
UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'()"


def encode_uri_component(text: str) -> str:
    """A second, byte-by-byte reading of encodeURIComponent (no urllib)."""
    out = []
    for char in text:
        if char in UNRESERVED:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def search_key(**criteria: str | int | None) -> str:
    return cache_key(
        namespace="library",
        operation="search",
        tenant="branch-2",
        generation=4,
        criteria=criteria,
    )


# --- the contract's example and the canonical form ------------------------------


def test_contract_example():
    assert search_key(title="Sand", author="Borges") == (
        BRANCH_2 + ":search:" + "author=Borges&title=Sand"
    )


def test_defaults_are_schema_1_generation_1_and_no_criteria_means_no_tail():
    key = cache_key(namespace="library", operation="stats", tenant="branch-1")
    assert key == "library:s1:g1:tbranch-1:stats"
    assert key.count(":") == 4


def test_empty_values_are_dropped_but_zero_is_kept():
    assert search_key(title="Sand", author="", year=None) == search_key(title="Sand")
    assert search_key(author="", year=None) == BRANCH_2 + ":search"
    assert search_key(page=0).endswith(":page=0")


def test_order_of_criteria_does_not_matter():
    forward = search_key(author="Atay", title="The Disconnected", page=2)
    backward = search_key(page=2, title="The Disconnected", author="Atay")
    assert forward == backward
    assert forward.endswith(":author=Atay&page=2&title=The%20Disconnected")


def test_names_sort_by_utf16_code_units_like_javascript():
    # U+FF21 (fullwidth A) is above the surrogates in code points but one astral
    # character (U+1D400) is below it in UTF-16 code units: JS sorts the astral first.
    text = canonical_criteria({"\uff21": "1", "\U0001d400": "2", "a": "3"})
    assert text == "a=3&%F0%9D%90%80=2&%EF%BC%A1=1"


def test_integers_and_their_text_ask_the_same_question():
    assert search_key(page=3) == search_key(page="3")


# --- escaping ---------------------------------------------------------------------


def test_unreserved_characters_stay_as_they_are():
    assert escape_part(UNRESERVED) == UNRESERVED


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        (":", "%3A"),  # the key's field separator
        ("&", "%26"),  # the criteria pair separator
        ("=", "%3D"),  # the name/value separator
        ("%", "%25"),  # the escape character itself
        (" ", "%20"),
        ("/?#[]@", "%2F%3F%23%5B%5D%40"),
        ("$+,;", "%24%2B%2C%3B"),
        ('"<>\\^`{|}', "%22%3C%3E%5C%5E%60%7B%7C%7D"),
        ("\t\n\x00\x7f", "%09%0A%00%7F"),
        ("é", "%C3%A9"),  # two UTF-8 bytes
        ("ğ", "%C4%9F"),
        ("€", "%E2%82%AC"),  # three bytes
        ("\U0001f4da", "%F0%9F%93%9A"),  # four bytes, a surrogate pair in JS
    ],
)
def test_special_characters_are_percent_escaped(text, escaped):
    assert escape_part(text) == escaped
    assert escape_part(text) == encode_uri_component(text)


@given(st.text(max_size=40))
def test_escaping_matches_a_byte_by_byte_encoder(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(CacheKeyError):
            escape_part(text)
        return
    assert escape_part(text) == encode_uri_component(text)


def test_a_lone_surrogate_is_refused_like_javascript_throws():
    with pytest.raises(CacheKeyError, match="surrogate"):
        search_key(title="\ud800")


def test_the_colon_in_a_value_no_longer_collides():
    glued = search_key(title="Sand: Borges", author="")
    assert glued == BRANCH_2 + ":search:" + "title=Sand%3A%20Borges"
    assert glued != search_key(title="Sand", author="Borges")


# --- the length limit -------------------------------------------------------------


@pytest.mark.parametrize("length", [47, 48, 49])
def test_criteria_are_summarised_only_above_48_characters(length):
    text = "q=" + "x" * (length - 2)
    assert len(text) == length
    key = search_key(q="x" * (length - 2))
    if length <= CRITERIA_LIMIT:
        assert key == f"{BRANCH_2}:search:{text}"
    else:
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        assert key == f"{BRANCH_2}:search:c_{digest}"


def test_the_limit_counts_escaped_characters():
    # 16 spaces are 48 characters once escaped: "q=" + 46 would fit, 16 * "%20" not.
    assert search_key(q=" " * 15).endswith(":q=" + "%20" * 15)
    assert ":c_" in search_key(q=" " * 16)


def test_long_criteria_keep_the_readable_head():
    criteria: dict[str, str | int | None] = {
        "page": 3,
        "sort": "title",
        "lang": "tr",
        "status": "on_shelf",
        "yearTo": 1980,
        "yearFrom": 1970,
        "author": "Oğuz Atay",
        "title": "The Disconnected",
    }
    key = cache_key(
        namespace="library",
        operation="search",
        tenant="branch-1",
        generation=4,
        criteria=criteria,
    )
    assert key == "library:s1:g4:tbranch-1:search:c_" + "648d4755bc125b8e"
    assert len(key) == 49


# --- no part can forge another key ------------------------------------------------


@pytest.mark.parametrize(
    ("forged", "honest"),
    [
        # a tenant that tries to carry an operation and criteria of its own
        (
            {"tenant": "branch-2:search:title=Sand", "operation": "x"},
            {"tenant": "branch-2", "operation": "search"},
        ),
        # a namespace that tries to supply schema, generation and tenant
        (
            {"namespace": "library:s1:g4:tbranch-3", "tenant": "x"},
            {"namespace": "library", "tenant": "branch-3"},
        ),
        # an operation that tries to append criteria
        (
            {"operation": "list:page=1", "tenant": "branch-3"},
            {"operation": "list", "tenant": "branch-3"},
        ),
    ],
)
def test_a_part_with_separators_cannot_produce_another_tenants_key(forged, honest):
    base = {"namespace": "library", "operation": "list", "generation": 4}
    honest_keys = {
        cache_key(**{**base, **honest}),
        cache_key(**{**base, **honest}, criteria={"page": 1}),
        cache_key(**{**base, **honest}, criteria={"title": "Sand"}),
    }
    forged_key = cache_key(**{**base, **forged})
    assert forged_key not in honest_keys
    assert "%3A" in forged_key
    assert forged_key.count(":") == 4


def test_criteria_with_separators_cannot_forge_other_criteria():
    assert search_key(title="Sand&author=Borges") != search_key(
        title="Sand", author="Borges"
    )
    assert search_key(**{"title=Sand&author": "Borges"}) != search_key(
        title="Sand", author="Borges"
    )


def parse(key: str) -> tuple[str, int, int, str, str, dict[str, str]]:
    """Read a key back into its parts (only for keys without a digest)."""
    fields = key.split(":")
    assert len(fields) in (5, 6)
    namespace, schema, generation, tenant, operation = fields[:5]
    criteria: dict[str, str] = {}
    if len(fields) == 6:
        for pair in fields[5].split("&"):
            name, value = pair.split("=")
            criteria[unquote(name)] = unquote(value)
    assert (schema[0], generation[0], tenant[0]) == ("s", "g", "t")
    return (
        unquote(namespace),
        int(schema[1:]),
        int(generation[1:]),
        unquote(tenant[1:]),
        unquote(operation),
        criteria,
    )


words = st.text(min_size=1, max_size=12).filter(lambda s: s.isprintable())
small_words = st.text(alphabet=":&=%a-2 ", min_size=1, max_size=5)
values = st.one_of(st.none(), st.just(""), st.integers(-5, 1000), small_words)
parts = st.fixed_dictionaries(
    {
        "namespace": st.one_of(small_words, words),
        "operation": small_words,
        "tenant": st.one_of(small_words, words),
        "generation": st.integers(0, 20),
        "schema_version": st.integers(1, 3),
        "criteria": st.dictionaries(small_words, values, max_size=4),
    }
)


def canonical(parts: dict[str, Any]) -> tuple[object, ...]:
    criteria = {
        name: str(value)
        for name, value in parts["criteria"].items()
        if value is not None and value != ""
    }
    return (
        parts["namespace"],
        parts["schema_version"],
        parts["generation"],
        parts["tenant"],
        parts["operation"],
        criteria,
    )


@settings(max_examples=300, deadline=None)
@given(parts)
def test_a_readable_key_decodes_back_to_exactly_its_inputs(parts):
    key = cache_key(**parts)
    if ":c_" in key:
        return  # summarised: covered by the distinctness property below
    assert parse(key) == canonical(parts)


@settings(max_examples=300, deadline=None)
@given(parts, parts)
def test_distinct_questions_get_distinct_keys(first, second):
    same_question = canonical(first) == canonical(second)
    assert (cache_key(**first) == cache_key(**second)) == same_question


@given(parts, st.randoms(use_true_random=False))
def test_the_key_is_deterministic_whatever_the_criteria_order(parts, rnd):
    items = list(parts["criteria"].items())
    rnd.shuffle(items)
    assert cache_key(**parts) == cache_key(**{**parts, "criteria": dict(items)})


# --- refusing bad parts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"namespace": ""}, "namespace must be non-empty text"),
        ({"tenant": ""}, "tenant must be non-empty text"),
        ({"operation": 7}, "operation must be non-empty text"),
        ({"generation": -1}, "generation must be a whole number >= 0"),
        ({"generation": True}, "generation must be a whole number"),
        ({"generation": "4:tbranch-3"}, "generation must be a whole number"),
        ({"schema_version": 0}, "schema version must be a whole number >= 1"),
        ({"criteria": {"year": 1.5}}, "value must be text or a whole number"),
        ({"criteria": {"on_shelf": True}}, "value must be text or a whole number"),
        ({"criteria": {"": "x"}}, "criterion name must be non-empty text"),
    ],
)
def test_bad_parts_are_refused_with_one_line(change, reason):
    parts = {"namespace": "library", "operation": "list", "tenant": "branch-1"}
    with pytest.raises(CacheKeyError, match=reason) as info:
        cache_key(**{**parts, **change})
    assert "\n" not in str(info.value)


def test_key_spec_fixes_the_family_and_checks_it_when_declared():
    spec = KeySpec(namespace="library", operation="search")
    assert spec.key(tenant="branch-2", generation=4, criteria={"title": "Sand"}) == (
        search_key(title="Sand")
    )
    with pytest.raises(CacheKeyError):
        KeySpec(namespace="", operation="search")


# --- the operator command ---------------------------------------------------------


def cachekey(*args: str) -> tuple[object, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("cachekey", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


CONTRACT_ARGS = [
    "--namespace",
    "library",
    "--operation",
    "search",
    "--tenant",
    "branch-2",
    "--generation",
    "4",
    "--criteria",
    "title=Sand",
    "--criteria",
    "author=Borges",
]


def test_command_prints_the_contract_example():
    status, out, err = cachekey(*CONTRACT_ARGS)
    assert (status, err) == (0, "")
    assert out == BRANCH_2 + ":search:" + "author=Borges&title=Sand\n"


def test_command_schema_version_and_empty_criteria():
    status, out, _ = cachekey(
        "--namespace", "library", "--operation", "list", "--tenant", "branch-3",
        "--schema-version", "2", "--criteria", "page=1", "--criteria", "author=",
    )  # fmt: skip
    assert status == 0
    assert out == "library:s2:g1:tbranch-3:list:page=1\n"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--criteria", "title"], "--criteria needs NAME=VALUE"),
        (["--criteria", "a=1", "--criteria", "a=2"], "criterion 'a' given twice"),
        (["--generation", "-1"], "generation must be a whole number >= 0"),
        (["--schema-version", "0"], "schema version must be"),
        (["--criteria", "=x"], "criterion name must be non-empty"),
    ],
)
def test_command_bad_input_is_one_line_and_status_2(extra, needle):
    status, out, err = cachekey(*CONTRACT_ARGS[:6], *extra)
    assert status == 2
    assert out == ""
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBUG": "true"}
    return subprocess.run(
        [sys.executable, "manage.py", "cachekey", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.processes
def test_real_process_output_and_argument_errors():
    done = _manage(*CONTRACT_ARGS)
    assert done.returncode == 0
    assert done.stdout == BRANCH_2 + ":search:" + "author=Borges&title=Sand\n"
    missing = _manage("--namespace", "library", "--operation", "search")
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        "cachekey: the following arguments are required: --tenant"
    ]
    not_int = _manage(*CONTRACT_ARGS[:6], "--generation", "four")
    assert not_int.returncode == 2
    assert len(not_int.stderr.strip().splitlines()) == 1
    assert "invalid int value: 'four'" in not_int.stderr

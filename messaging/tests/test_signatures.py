"""Error signatures (pure): letters that failed the same way share one.

Three letters that failed alike made three clusters in the admin, because each
error named its own member, row or job. The signature keeps the words and takes
the values out.
"""

from __future__ import annotations

import pytest

from messaging.signatures import SIGNATURE_MAX, error_signature


@pytest.mark.parametrize(
    ("errors", "signature"),
    [
        (
            [
                "LookupError: member 7 not found",
                "LookupError: member 12 not found",
                "LookupError: member 1 not found",
            ],
            "LookupError: member <n> not found",
        ),
        (
            [
                "job 1b4e28ba-2fa1-11d2-883f-0016d3cca427 failed",
                "job 6F9619FF-8B86-D011-B42D-00C04FC964FF failed",
            ],
            "job <uuid> failed",
        ),
        (
            ["row 5f3a9c0d1e2b is gone", "row 0a1b2c3d4e5f6a7b is gone"],
            "row <hex> is gone",
        ),
        (
            ["<Book object at 0x7f3a9c0d1e2b>", "<Book object at 0x7f00deadbeef>"],
            "<Book object at <hex>>",
        ),
        (
            ["KeyError: 'book_id'", 'KeyError: "member_id"'],
            "KeyError: '…'",
        ),
        (
            [
                "timeout after 2.5 s at 2026-12-05 09:08:01",
                "timeout after 30 s at 2026-12-06 23:59:59",
            ],
            "timeout after <n> s at <n>-<n>-<n> <n>:<n>:<n>",
        ),
        (
            ["Book #12 has no copy\n  (3 asked)", "Book #7 has no copy (1 asked)"],
            "Book #<n> has no copy (<n> asked)",
        ),
    ],
)
def test_errors_that_differ_only_in_values_share_a_signature(errors, signature):
    assert {error_signature(error) for error in errors} == {signature}


@pytest.mark.parametrize(
    "error",
    [
        "utf8 codec failed",  # a digit inside a word is part of the word
        "needs py3.11 and v2",
        "accessed a deadbeef facade",  # hex letters alone may be words
        "can't reach the layer",  # an apostrophe is not a quote
    ],
)
def test_words_are_kept(error):
    assert error_signature(error) == error


def test_different_failures_keep_different_signatures():
    assert error_signature("LookupError: member 7 not found") != error_signature(
        "LookupError: book 7 not found"
    )


def test_a_signature_is_bounded():
    assert len(error_signature("x" * 10_000)) == SIGNATURE_MAX

"""Forms of the library pages: they parse and validate input, the services decide."""

from __future__ import annotations

import datetime
import re
import secrets
from collections.abc import Callable
from typing import Any, Final

from django import forms

from library import selectors


class BookSearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=100, strip=True, label="Search")


_SEARCH_MAX = selectors.SEARCH_MAX_CHARS


def _search_input(placeholder: str, **attrs: str) -> forms.TextInput:
    # The browser's own autocomplete would cover the desk's suggestions.
    return forms.TextInput(
        attrs={
            "autocomplete": "off",
            "spellcheck": "false",
            "autocapitalize": "none",
            "placeholder": placeholder,
            **attrs,
        }
    )


def _picked_id(raw: str) -> int | None:
    """Return the id a hidden field or radio carried; raise when it is not one."""
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 0 < value < 2**31:
        raise forms.ValidationError(
            "That choice is not valid any more; search again.", code="invalid"
        )
    return value


class DeskSearchForm(forms.Form):
    """A form whose fields name rows by search text, resolved by a selector.

    Each searched field ``<name>`` has a hidden ``<name>_id`` beside it: the id a
    suggestion (desk.js) or a radio of the choice list picked. After validation
    ``cleaned_data["<name>_id"]`` holds the id to act on. When the text matches
    several rows the field gets an error with code ``ambiguous`` and
    ``candidates[name]`` lists them, so the page can offer the choice: that is a
    question, not bad input (``only_ambiguous``).
    """

    # (field name, noun for messages, the selector that resolves the field)
    searched: tuple[tuple[str, str, Callable[..., selectors.Pick[Any]]], ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.candidates: dict[str, list[Any]] = {}
        self.more: dict[str, bool] = {}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name, noun, pick in self.searched:
            self._resolve(data, name, noun, pick)
        return data

    def _resolve(
        self,
        data: dict[str, Any],
        name: str,
        noun: str,
        pick: Callable[..., selectors.Pick[Any]],
    ) -> None:
        text = data.get(name)
        if text is None:  # the text itself was refused (too long)
            return
        try:
            picked = _picked_id(data.get(f"{name}_id") or "")
        except forms.ValidationError as error:
            self.add_error(name, error)
            return
        if picked is None and not text:
            self.add_error(name, f"Name the {noun}: {self.fields[name].help_text}")
            return
        if picked is None and not selectors.searchable(text):
            self.add_error(
                name,
                f"Type at least {selectors.SEARCH_MIN_CHARS} characters, "
                "or a number like #12.",
            )
            return
        found = pick(text=text, picked_id=picked)
        if found.chosen is not None:
            data[f"{name}_id"] = found.chosen
            return
        if found.candidates:
            self.candidates[name] = found.candidates
            self.more[name] = found.more
            self.add_error(
                name,
                forms.ValidationError(
                    f"Several {noun}s match “{text}”: pick one below.",
                    code="ambiguous",
                ),
            )
            return
        self.add_error(name, f"No {noun} matches “{text}”.")

    def only_ambiguous(self) -> bool:
        """Return whether every error is a choice still to make."""
        return bool(self.errors) and all(
            error.code == "ambiguous"
            for errors in self.errors.as_data().values()
            for error in errors
        )

    def resolved_id(self, name: str) -> int | None:
        """Return the id a searched field resolved to (after validation), or None."""
        value = getattr(self, "cleaned_data", {}).get(f"{name}_id")
        return value if isinstance(value, int) else None


_KEY: Final = re.compile(r"[A-Za-z0-9_-]{16,64}")


def idempotency_key_new() -> str:
    """Return a fresh random key for one rendering of a desk form."""
    return secrets.token_urlsafe(24)


class IdempotentForm(forms.Form):
    """A form that carries the idempotency key it was rendered with.

    The key is a hidden field, new on each blank form and kept when a refused form
    is shown again (a refusal changed nothing, so the key is still unused). The
    view hands it to ``library.services.loan_issue_once``/``loan_return_once``,
    which answer a second copy of the same submission with the first one's result.
    A form posted without a key (a script, a page from before keys) still works,
    without that protection.
    """

    idempotency_key = forms.CharField(
        required=False,
        max_length=64,
        widget=forms.HiddenInput,
        initial=idempotency_key_new,
    )

    def clean_idempotency_key(self) -> str | None:
        key = self.cleaned_data.get("idempotency_key") or ""
        if not key:
            return None
        if _KEY.fullmatch(key) is None:
            # Hidden, so said on the whole form: only a damaged page sends this.
            self.add_error(None, "This form is damaged; open it again.")
            return None
        return key


class LoanIssueForm(IdempotentForm, DeskSearchForm):
    book = forms.CharField(
        required=False,
        max_length=_SEARCH_MAX,
        label="Book",
        help_text="part of the title or the author, or the book number (#12).",
        widget=_search_input("Title or author…", autofocus="autofocus"),
    )
    book_id = forms.CharField(required=False, widget=forms.HiddenInput)
    member = forms.CharField(
        required=False,
        max_length=_SEARCH_MAX,
        label="Member",
        help_text="the name, or the card number (#7).",
        widget=_search_input("Name or card number…"),
    )
    member_id = forms.CharField(required=False, widget=forms.HiddenInput)

    searched = (
        ("book", "book", selectors.book_pick),
        ("member", "member", selectors.member_pick),
    )


class LoanFindForm(DeskSearchForm):
    """The return desk's search: an open loan by its book or its member."""

    loan = forms.CharField(
        required=False,
        max_length=_SEARCH_MAX,
        label="Book or member",
        help_text="part of the title, the member's name, or the card number (#7).",
        widget=_search_input("Title, member or card…", autofocus="autofocus"),
    )
    loan_id = forms.CharField(required=False, widget=forms.HiddenInput)

    searched = (("loan", "open loan", selectors.open_loan_pick),)


class SuggestForm(forms.Form):
    """The query of a suggestion endpoint; an over-long one is refused (400)."""

    q = forms.CharField(required=False, max_length=_SEARCH_MAX, strip=True)


class LoanReturnForm(IdempotentForm):
    return_date = forms.DateField(
        required=False,
        label="Return date",
        help_text="Leave empty for today.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def __init__(
        self,
        *args: Any,
        earliest: datetime.date | None = None,
        latest: datetime.date | None = None,
        **kwargs: Any,
    ) -> None:
        """Show the allowed range (the loan's pickup to today) on the field.

        Only shown: ``loan_return`` decides, and its refusal lands on this field.
        """
        super().__init__(*args, **kwargs)
        field = self.fields["return_date"]
        if earliest is not None:
            field.widget.attrs["min"] = earliest.isoformat()
        if latest is not None:
            field.widget.attrs["max"] = latest.isoformat()
        if earliest is not None and latest is not None:
            field.help_text = (
                f"Leave empty for today. Between the pickup ({earliest:%d %b %Y}) "
                f"and today ({latest:%d %b %Y})."
            )

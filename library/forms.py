"""Forms of the library pages: they parse and validate input, the services decide."""

from __future__ import annotations

import datetime
from typing import Any

from django import forms


class BookSearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=100, strip=True, label="Search")


class LoanIssueForm(forms.Form):
    book_id = forms.IntegerField(
        min_value=1,
        label="Book id",
        widget=forms.NumberInput(attrs={"inputmode": "numeric", "autofocus": True}),
    )
    member_id = forms.IntegerField(
        min_value=1,
        label="Member id",
        widget=forms.NumberInput(attrs={"inputmode": "numeric"}),
    )


class LoanReturnForm(forms.Form):
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

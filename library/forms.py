"""Forms of the library pages: they parse and validate input, the services decide."""

from __future__ import annotations

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

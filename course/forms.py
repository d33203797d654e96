"""The parameter form of a lab, built from the lab's typed parameter list."""

from __future__ import annotations

from typing import Any

from django import forms

from course.labs.base import Lab, ParamError, Params


class LabForm(forms.Form):
    """One text field per parameter, parsed with the same rules as ``lab --set``.

    Text fields (not IntegerField) keep one parser for the form and the command line,
    so both give the same one-line reasons for the same bad value. A field left empty
    (or not sent at all) keeps the lab's default, as an omitted ``--set`` does.
    """

    def __init__(self, lab: Lab, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lab = lab
        self.params: Params = {}
        for param in lab.params:
            attrs = {"autocomplete": "off", "spellcheck": "false"}
            if param.kind in ("int", "float"):
                attrs["inputmode"] = "numeric" if param.kind == "int" else "decimal"
            self.fields[param.name] = forms.CharField(
                label=param.name,
                initial=param.text(param.default),
                help_text=f"{param.help} ({param.describe_range()})",
                max_length=param.max_length,
                required=False,
                strip=True,
                widget=forms.TextInput(attrs=attrs),
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        values: Params = {}
        for param in self.lab.params:
            text = cleaned.get(param.name)
            if not text:
                continue  # empty: the default applies (or the field has its error)
            try:
                values[param.name] = param.parse(text)
            except ParamError as error:
                self.add_error(param.name, str(error))
        if not self.errors:
            try:
                self.params = self.lab.validate(values)
            except ParamError as error:
                self.add_error(None, str(error))
        return cleaned

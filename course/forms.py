"""The parameter form of a lab, built from the lab's typed parameter list."""

from __future__ import annotations

import math
from typing import Any

from django import forms

from course.labs.harness.base import Lab, ParamError, Params
from course.services.labqueue import Choice

PREDICTION_ERROR = "Give a number, like 12 or 8.5."


def prediction_parse(text: str) -> float | None:
    """Return a learner's guess as a number ("1,200", "8.5 %" too), or None."""
    try:
        number = float(text.replace(",", "").rstrip("%").strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and abs(number) < 1e15 else None


class LabForm(forms.Form):
    """One text field per parameter, parsed with the same rules as ``lab --set``.

    The "live" checkbox asks for the live part too; a user who may not run live
    parts (``live_refusal`` says why: no account, or the right withdrawn) gets that
    reason as the field's error when they tick it anyway, and so does a value the
    live part cannot run (``Lab.live_refusal``).

    Text fields (not IntegerField) keep one parser for the form and the command line,
    so both give the same one-line reasons for the same bad value. A field left empty
    (or not sent at all) keeps the lab's default, as an omitted ``--set`` does.
    """

    LIVE_FIELD = "live"
    LIVE_NEEDS_ACCOUNT = (
        "Measuring the live system needs an account (it is free): a live run "
        "starts real worker and server processes for you."
    )
    LIVE_WITHDRAWN = (
        "An operator has withdrawn this account's right to run live parts; the "
        "model still runs."
    )

    PREDICTION_FIELD = "prediction"
    # What the learner chose when an identical run finished lately (course.services).
    CHOICE_FIELD = "choice"

    def __init__(
        self,
        lab: Lab[Any],
        *args: Any,
        live_refusal: str = "",
        predict_prompt: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lab = lab
        self.params: Params = {}
        self.live_refusal = live_refusal
        self.live = False
        self.live_refused = False
        self.prediction: float | None = None
        self.choice = Choice.AUTO
        self.fields[self.CHOICE_FIELD] = forms.ChoiceField(
            choices=[(choice.value, choice.value) for choice in Choice],
            required=False,
            widget=forms.HiddenInput,
        )
        if predict_prompt:
            # Optional: a run without a guess is still a run.
            self.fields[self.PREDICTION_FIELD] = forms.CharField(
                label="Your prediction",
                help_text=predict_prompt,
                required=False,
                max_length=40,
                strip=True,
                widget=forms.TextInput(
                    attrs={"inputmode": "decimal", "autocomplete": "off"}
                ),
            )
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
        # Not ``disabled`` in the form's logic: a disabled field ignores what is
        # sent, and a request asking for the live part must be refused, not
        # ignored. The widget is disabled for the browser only.
        help_text = live_refusal or (
            "Asks the real system the same question in a sandbox of its own "
            "(a copy of the database, its own Redis server, its own rq "
            "workers or web servers), measures what really happens and "
            "removes the sandbox. A live run takes tens of seconds; runs are "
            "taken in turn across learners, and a run identical to one "
            "already waiting or running is joined, not repeated."
        )
        self.fields[self.LIVE_FIELD] = forms.BooleanField(
            label="Also measure the live system",
            required=False,
            help_text=help_text,
            widget=forms.CheckboxInput(
                attrs={"disabled": True} if live_refusal else {}
            ),
        )

    @property
    def may_run_live(self) -> bool:
        return not self.live_refusal

    @property
    def param_fields(self) -> list[forms.BoundField]:
        """Return the bound fields of the lab's parameters (not the live switch)."""
        return [self[param.name] for param in self.lab.params]

    @property
    def prediction_field(self) -> forms.BoundField | None:
        if self.PREDICTION_FIELD not in self.fields:
            return None
        return self[self.PREDICTION_FIELD]

    @property
    def live_field(self) -> forms.BoundField | None:
        return self[self.LIVE_FIELD] if self.LIVE_FIELD in self.fields else None

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
        guess = cleaned.get(self.PREDICTION_FIELD)
        if guess:
            self.prediction = prediction_parse(str(guess))
            if self.prediction is None:
                self.add_error(self.PREDICTION_FIELD, PREDICTION_ERROR)
        self.choice = Choice(cleaned.get(self.CHOICE_FIELD) or Choice.AUTO.value)
        if cleaned.get(self.LIVE_FIELD):
            if not self.live_refusal:
                self.live = True
            else:
                self.live_refused = True
                self.add_error(self.LIVE_FIELD, self.live_refusal)
        if not self.errors:
            try:
                self.params = self.lab.validate(values)
            except ParamError as error:
                self.add_error(None, str(error))
        if self.live and not self.errors:
            # A value only the model runs: said on the box, before a run is asked.
            refusal = self.lab.live_refusal(self.params)
            if refusal:
                self.add_error(self.LIVE_FIELD, refusal)
        return cleaned

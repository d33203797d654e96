"""Every admin action of every app names the permission it needs.

Django offers an action to anyone who may see the list unless the action declares
``permissions``; an action without them is open to a view-only operator. This walks
what the admin site really serves, so an action added later is held to the same
rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory

pytestmark = pytest.mark.django_db

# Permissions that only let a user look: an action that changes something needs more.
LOOKING_ONLY = {"view"}


def registered_actions() -> list[tuple[str, str, Callable[..., Any], Any]]:
    """Return (model label, action name, function, ModelAdmin) for every action.

    Asked as a superuser, so no action is filtered out by its own permission check.
    """
    superuser = get_user_model()(username="walker", is_staff=True, is_superuser=True)
    request = RequestFactory().get("/admin/")
    request.user = superuser
    found = []
    for model, model_admin in admin.site._registry.items():
        for name, entry in model_admin.get_actions(request).items():
            if entry is not None:
                found.append((model._meta.label, name, entry[0], model_admin))
    return found


def test_the_walk_finds_the_actions_it_is_about():
    names = {(label, name) for label, name, _, _ in registered_actions()}
    assert ("jobs.JobStatus", "cancel_selected") in names
    assert ("jobs.JobStatus", "resume_selected") in names
    assert ("library.Loan", "return_loans") in names


def test_every_admin_action_declares_the_permission_it_needs():
    undeclared, looking_only, unchecked = [], [], []
    for label, name, function, model_admin in registered_actions():
        needed = set(getattr(function, "allowed_permissions", ()) or ())
        if not needed:
            undeclared.append(f"{label}.{name}")
        elif needed <= LOOKING_ONLY:
            looking_only.append(f"{label}.{name}")
        for permission in needed:
            if not callable(getattr(model_admin, f"has_{permission}_permission", None)):
                unchecked.append(f"{label}.{name}: has_{permission}_permission")
    assert undeclared == [], "actions that declare no permission"
    assert looking_only == [], "actions a view-only user may run"
    assert unchecked == [], "declared permissions with no check on the ModelAdmin"

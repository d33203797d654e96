"""The accounts tests sign in with through the real login form."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from library.permissions import ISSUE_LOAN, permission_get

# Long enough for the password validators; the hasher is the tests' cheap one.
DESK_PASSWORD = "correct-horse-battery"


def account(username: str, *, staff: bool = False) -> User:
    """Create a user who signs in with ``DESK_PASSWORD``.

    Staff are superusers, as the seed's desk account, so the admin opens fully.
    """
    user: User = get_user_model().objects.create_user(
        username=username, password=DESK_PASSWORD, is_staff=staff, is_superuser=staff
    )
    return user


def desk_user(username: str = "desk", *permissions: str) -> User:
    """Create a staff member who may issue loans (and whatever else is named)."""
    user: User = get_user_model().objects.create_user(
        username, password=DESK_PASSWORD, is_staff=True
    )
    user.user_permissions.add(
        *(permission_get(name) for name in (ISSUE_LOAN, *permissions))
    )
    return user

"""The staff accounts tests sign in with through the real login form."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from library.permissions import ISSUE_LOAN, permission_get

# Long enough for the password validators; the hasher is the tests' cheap one.
DESK_PASSWORD = "correct-horse-battery"


def desk_user(username: str = "desk", *permissions: str) -> User:
    """Create a staff member who may issue loans (and whatever else is named)."""
    user: User = get_user_model().objects.create_user(
        username, password=DESK_PASSWORD, is_staff=True
    )
    user.user_permissions.add(
        *(permission_get(name) for name in (ISSUE_LOAN, *permissions))
    )
    return user

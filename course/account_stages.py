"""The sign-in stage that asks for a verified e-mail address (course.accounts).

Its own module: allauth imports it by its dotted path when a sign-in runs, after
allauth's own modules have loaded (importing allauth's stages any earlier, while
the adapter loads, runs into an import cycle inside allauth).
"""

from __future__ import annotations

from typing import Any

from allauth.account.models import EmailAddress
from allauth.account.stages import EmailVerificationStage


class OperatorMadeAccountsVerified(EmailVerificationStage):
    """Ask for a verified address only of accounts that signed up with one.

    An account an operator made (the admin, ``seed_library``, ``createsuperuser``)
    has no address on record, so there is nothing to verify: it signs in.
    """

    def handle(self) -> tuple[Any, bool]:
        if not EmailAddress.objects.filter(user=self.login.user).exists():
            return None, True
        response, cont = super().handle()
        return response, cont

"""CSRF tokens: every action carries a token that only the console's own page holds.

A browser sends Basic credentials with any request to the console, including a form
another site submits; the token is what such a forged request cannot have. It is an
HMAC of the user's name under a secret drawn when the process starts, so it needs no
server-side session, differs per user and ends with the process.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from tidegate.console.errors import CsrfRefused

__all__ = ["CsrfTokens"]


class CsrfTokens:
    """Issue and check the per-user token.

    Args:
        secret: the HMAC key; a fresh random one when omitted (tests may fix it).
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else os.urandom(32)

    def token_for(self, user: str) -> str:
        """The token the page of ``user`` carries in each action form."""
        return hmac.new(self._secret, f"csrf:{user}".encode(), hashlib.sha256).hexdigest()

    def check(self, user: str, given: str | None) -> None:
        """Raise :class:`CsrfRefused` unless ``given`` is ``user``'s token."""
        if not given or not hmac.compare_digest(self.token_for(user), given):
            raise CsrfRefused("the action did not carry this console's CSRF token")

"""The console's part of the error tree: why a request was refused before any action.

Each error carries the HTTP status it is answered with, so the web layer maps errors
to answers in one place::

    TidegateError                  (tidegate.errors)
    └── ConsoleError               refused by the operator console
        ├── Unauthenticated        401: no credentials, or unknown ones
        ├── Forbidden              403: a viewer asked for an operator's action
        ├── CsrfRefused            403: an action without this session's CSRF token
        └── BadAction              400: an action whose form is incomplete or out of range

No message here ever quotes a password, a token or a payload.
"""

from __future__ import annotations

from typing import ClassVar

from tidegate.errors import TidegateError

__all__ = ["BadAction", "ConsoleError", "CsrfRefused", "Forbidden", "Unauthenticated"]


class ConsoleError(TidegateError):
    """A console request refused before it changed anything."""

    #: The HTTP status it is answered with.
    http_status: ClassVar[int] = 400


class Unauthenticated(ConsoleError):
    """No credentials, or credentials nobody in the user file has."""

    http_status: ClassVar[int] = 401


class Forbidden(ConsoleError):
    """The user is known but their role does not allow the action."""

    http_status: ClassVar[int] = 403


class CsrfRefused(ConsoleError):
    """A state-changing request without the token only the console's own page carries."""

    http_status: ClassVar[int] = 403


class BadAction(ConsoleError):
    """The action's form is incomplete, or a value is outside its range."""

    http_status: ClassVar[int] = 400

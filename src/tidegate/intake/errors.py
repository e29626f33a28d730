"""The intake's part of the error tree: why a request was refused before any decision.

Each error carries the HTTP status it is answered with and a stable ``code`` for the
JSON body, so the HTTP layer maps errors to answers in one place and never parses a
message string::

    TidegateError                           (tidegate.errors)
    ├── IntakeError                         refused at the front door
    │   ├── BodyTooLarge                    413: above the body limit, not read further
    │   ├── UploadTimedOut                  408: the body did not arrive in time
    │   ├── Unauthenticated                 401: no API key, or an unknown one
    │   ├── SenderNotPermitted              403: the key does not own the UNB sender id
    │   └── UnacceptableInterchange         400: readable, but not one interchange we take
    └── EdifactError
        └── EdifactSyntaxError              (tidegate.edi.errors)
            └── NewlineTerminatedSegments   400: newlines where segment terminators belong

No message here ever quotes the body: at most a tag, a count or a separator.
"""

from __future__ import annotations

from typing import ClassVar

from tidegate.edi.errors import EdifactSyntaxError
from tidegate.errors import TidegateError

__all__ = [
    "BodyTooLarge",
    "IntakeError",
    "NewlineTerminatedSegments",
    "SenderNotPermitted",
    "UnacceptableInterchange",
    "Unauthenticated",
    "UploadTimedOut",
]


class IntakeError(TidegateError):
    """A request the intake refuses before reading the interchange's content."""

    #: The HTTP status it is answered with.
    http_status: ClassVar[int] = 400
    #: Stable machine-readable code for the JSON answer.
    code: ClassVar[str] = "intake"


class BodyTooLarge(IntakeError):
    """The body is (or announces to be) above the limit; nothing more of it is read."""

    http_status = 413
    code = "body_too_large"

    def __init__(self, limit: int, *, announced: int | None = None) -> None:
        self.limit = limit
        self.announced = announced
        size = f"{announced} bytes" if announced is not None else "more"
        super().__init__(
            f"the body is {size}, above the intake limit of {limit} bytes; "
            "split the interchange or ask for a higher limit"
        )


class UploadTimedOut(IntakeError):
    """The body did not arrive within the read timeout (a slow or stalled upload)."""

    http_status = 408
    code = "upload_timeout"

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(f"the body did not arrive within {timeout_s:g} s")


class Unauthenticated(IntakeError):
    """No API key was presented, or the key is not known."""

    http_status = 401
    code = "unauthenticated"


class SenderNotPermitted(IntakeError):
    """The API key's client does not own the interchange's UNB sender id."""

    http_status = 403
    code = "sender_not_permitted"

    def __init__(self, client: str, sender: str) -> None:
        self.client = client
        self.sender = sender
        super().__init__(f"client {client!r} may not submit interchanges from sender {sender!r}")


class UnacceptableInterchange(IntakeError):
    """Readable EDIFACT that is not one interchange the intake can take.

    ``code`` says which case: ``multiple_interchanges``, ``unsupported_syntax_version``,
    ``empty_body``.
    """

    def __init__(self, code: str, message: str) -> None:
        self.reason_code = code
        super().__init__(message)


class NewlineTerminatedSegments(EdifactSyntaxError):
    """Segments are separated by newlines only, never by the segment terminator.

    Some exports replace the terminator with a line break. Read as EDIFACT, the whole
    file is then one segment, so the cause is named instead of a misleading syntax
    error far down the input.
    """

    code = "newline_terminated_segments"

"""The one error type the library's services raise."""

from __future__ import annotations


class LibraryError(Exception):
    """A rule of the library refused the request; ``message`` is safe to show.

    ``status`` is the HTTP status an interface should answer with: 404 when the thing
    named does not exist, 409 when the current state forbids the change.
    """

    def __init__(
        self, message: str, *, status: int = 409, code: str = "conflict"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def not_found(what: str, ident: object) -> LibraryError:
    return LibraryError(
        f"{what} #{ident} does not exist.", status=404, code="not_found"
    )

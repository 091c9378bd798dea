"""The one error type users see: a message that says what is wrong and where."""


class CollageError(Exception):
    """A user-facing failure: bad input, an unsupported model, a missing backend.

    The command-line tools print `str(error)` on one line and exit with status 1, so the
    message must name the file, node or op at fault.
    """

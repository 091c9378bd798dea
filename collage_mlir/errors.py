"""The one error type users see: a message that says what is wrong and where."""


class CollageError(Exception):
    """A user-facing failure: bad input, an unsupported model, a missing backend.

    The command-line tools print `str(error)` on one line and exit with status 1, so the
    message must name the file, node or op at fault.
    """


def first_line(e: BaseException) -> str:
    """The first non-blank line of an exception's text, cut to 300 characters (a backend's
    exception may carry pages); "" when it has none."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def one_line(e: BaseException) -> str:
    """An exception as one line for a message: its type and `first_line`."""
    first = first_line(e)
    return f"{type(e).__name__}: {first}" if first else type(e).__name__

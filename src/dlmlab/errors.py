"""The one exception type for bad user input.

The CLI prints a `UserError` as one line (naming the file or field and what to do) and exits
with code 2; any other exception is a bug and prints its traceback.  This module imports
nothing from the package, so every module can raise `UserError` without import cycles.

Besides `UserError`, the CLI treats an `OSError` that can only come from the machine, never from
the code (a full disk, a read-only file system, a missing permission), as a user error:
:func:`user_message` words both.
"""

from __future__ import annotations

import errno


class UserError(Exception):
    """Bad input from the user: a config, a file, a token id, a CLI argument, a busy folder."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError,)

# errno -> what it means for the user and what to do
_MACHINE_ERRNOS = {
    errno.ENOSPC: ("no space left on the device", "free some space (or use another --out) and run again"),
    errno.EDQUOT: ("disk quota exceeded", "free some space (or use another --out) and run again"),
    errno.EROFS: ("read-only file system", "choose a writable folder (--out)"),
    errno.EACCES: ("permission denied", "check the file's permissions or choose another folder"),
}


def user_message(e: BaseException) -> str | None:
    """The one-line message for a user error (a :class:`UserError`, or an ``OSError`` from a full,
    read-only or forbidden file system); ``None`` for anything else (a bug: show its traceback)."""
    if isinstance(e, UserError):
        msg = str(e)
    elif isinstance(e, OSError) and e.errno in _MACHINE_ERRNOS:
        what, todo = _MACHINE_ERRNOS[e.errno]
        where = f" at {e.filename}" if e.filename else ""
        if e.filename2:
            where += f" (-> {e.filename2})"
        msg = f"{what}{where}; {todo}"
    else:
        return None
    lines = [line.strip() for line in msg.splitlines() if line.strip()]
    return "; ".join(lines) or type(e).__name__

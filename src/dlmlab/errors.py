"""The one exception type for bad user input.

The CLI prints a `UserError` as one line (naming the file or field and what to do) and exits
with code 2; any other exception is a bug and prints its traceback.  This module imports
nothing from the package, so every module can raise `UserError` without import cycles.
"""


class UserError(Exception):
    """Bad input from the user: a config, a file, a token id, a CLI argument, a busy folder."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError,)

"""The one exception type commands raise for user errors (kept apart from main so that
`python -m npu_console.cli.main` and the console script catch the same class)."""


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code 2 (or `code`)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code

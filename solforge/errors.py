"""Errors that name where bad input came from: file, line (for JSONL) and field."""

from __future__ import annotations

from pathlib import Path


class SolforgeError(Exception):
    """Base class for every error solforge raises on purpose."""


class InputError(SolforgeError):
    """Bad input: a file, its line (JSONL, 1-based) and the field that is wrong."""

    def __init__(self, message: str, *, file: str | Path | None = None, line: int | None = None,
                 field: str | None = None):
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f" [{self.field}]"
        return f"{where}: {self.message}"

    def at(self, *, file: str | Path | None = None, line: int | None = None,
           field_prefix: str | None = None) -> "InputError":
        """The same error, placed in a file/line, with a parent field path prepended."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return InputError(self.message, file=file if file is not None else self.file,
                          line=line if line is not None else self.line, field=field)

"""Errors that name what to fix: the table file, the table and row, and the fix."""

from __future__ import annotations


class GenerationError(Exception):
    """Generation cannot produce a correct compose file; the message says why and what to do."""


class TableError(GenerationError):
    """A variant table holds a bad value.

    `table` is the file, `section` the TOML table (e.g. "replicas", "sidecars"), `row` the row
    within it (e.g. "r2", "proxy-glm53"), or None for table-level problems.
    """

    def __init__(self, table: str, section: str, row: str | None, message: str) -> None:
        self.table = table
        self.section = section
        self.row = row
        where = f"{table}: [{section}]" + (f" row {row}" if row is not None else "")
        super().__init__(f"{where}: {message}")

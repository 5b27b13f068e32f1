"""The harness's results table with its column names.

lm-eval's ``make_table`` names the columns by setting ``writer.headers``; pytablewriter releases before 0.47
(the lock holds 0.38) call that attribute ``header_list`` and silently ignore ``headers``, so the table
printed as ``| A | B | ... |``.  :func:`name_table_columns` gives the old writers a ``headers`` property
that is ``header_list`` (a no-op where the writer already has one).
"""

from __future__ import annotations


def name_table_columns() -> None:
    """Make ``writer.headers = [...]`` set the column names on this pytablewriter (idempotent)."""
    try:
        from pytablewriter.writer._table_writer import AbstractTableWriter
    except ImportError:  # another layout (a newer release): it has ``headers`` itself
        return
    if isinstance(getattr(AbstractTableWriter, "headers", None), property):
        return

    def _get(self):
        return self.header_list

    def _set(self, value):
        self.header_list = value

    AbstractTableWriter.headers = property(_get, _set, doc="the column names (pytablewriter >= 0.47's name)")


__all__ = ["name_table_columns"]

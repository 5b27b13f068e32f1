"""Progress bars: tqdm on a terminal, plain lines in a log file.

:func:`bar` takes tqdm's arguments.  Where it writes to a terminal (or a notebook) it is tqdm; a worker of
:func:`dlmlab.studies.parallel.map_jobs` calls :func:`set_worker_line` once, and from then on its bars are
drawn on that line (below the main process's bars), so the bars of several workers do not overwrite
each other.

Where the stream is not a terminal (``> log 2>&1``, ``nohup``, a pipe) a bar is a :class:`LineBar`: it
writes whole lines, never ``'\\r'`` or cursor moves, e.g.::

    reversal runs (one layer): 5/27 (19%) [02:10 elapsed, 09:32 left, 26.00s/job]

one line per finished unit (``log_every_s=0``, the studies' outer bars), or at most one every
``log_every_s`` seconds; and always a last line with the final count when the bar closes.  The time
left is the average time per unit so far times the units left (not a short moving average, which
jumps with every burst of parallel jobs).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm.auto import tqdm
from tqdm.std import tqdm as std_tqdm

DEFAULT_LOG_EVERY_S = 30.0
LINE_FORMAT = "{n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed} elapsed, {remaining} left, {rate_fmt}{postfix}]"
LINE_FORMAT_NO_TOTAL = "{n_fmt} [{elapsed} elapsed, {rate_fmt}{postfix}]"

_line: int | None = None


def set_worker_line(line: int) -> None:
    """Draw this process's bars on terminal line ``line`` (>= 0) from now on."""
    global _line
    if line < 0:
        raise ValueError(f"line must be >= 0, got {line}")
    _line = line


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (False for files, pipes, closed or odd streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _in_notebook() -> bool:
    """Whether tqdm.auto chose the notebook widget (kept: a notebook's stderr is no terminal but shows it)."""
    return any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)


class LineBar(std_tqdm):
    """A tqdm that writes whole lines (for logs): see the module docstring.

    ``log_every_s``: 0 = a line for every change of the count; else at most one line per that many
    seconds (the first ``log_every_s`` after the start).  A line is written only when the count changed
    since the last one (a new postfix alone writes nothing), except the first line at the start when
    ``log_every_s`` is 0.
    """

    _clock = staticmethod(time.monotonic)  # when lines were written (tests replace it)

    def __init__(self, *args: Any, log_every_s: float = DEFAULT_LOG_EVERY_S, **kwargs: Any) -> None:
        if log_every_s < 0:
            raise ValueError(f"log_every_s must be >= 0, got {log_every_s}")
        self._every = float(log_every_s)
        self._line_n: float | None = None  # count at the last line written (None: none yet)
        self._line_t = self._clock()  # (no line yet: the start)
        self._ready = False  # tqdm's __init__ refreshes once: write that first line below, in our format
        kwargs.pop("position", None)
        kwargs.pop("dynamic_ncols", None)
        kwargs.pop("ncols", None)
        kwargs["smoothing"] = 0  # time left from the average rate since the start
        if self._every == 0:  # every update reaches display(), which decides
            kwargs["mininterval"], kwargs["miniters"] = 0, 1
        super().__init__(*args, **kwargs)
        self._ready = True
        if not self.disable:
            self.refresh()

    def __str__(self) -> str:
        d = self.format_dict
        desc = d.get("prefix") or ""
        d.update(prefix="", bar_format=LINE_FORMAT if d.get("total") else LINE_FORMAT_NO_TOTAL)
        return (f"{desc.rstrip(': ')}: " if desc else "") + self.format_meter(**d)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is not None or self.disable or not self._ready:  # msg='': tqdm clearing; a log has nothing to clear
            return False
        now = self._clock()
        if self._every == 0:
            due = self._line_n is None or self.n != self._line_n
        else:
            due = self.n != self._line_n and now - self._line_t >= self._every
        if due:
            self._write_line(now)
        return due

    def _write_line(self, now: float) -> None:
        self._line_n, self._line_t = self.n, now
        self.fp.write(str(self) + "\n")
        getattr(self.fp, "flush", lambda: None)()

    def clear(self, nolock: bool = False) -> None:  # nothing drawn, nothing to clear
        pass

    def moveto(self, n: int) -> None:  # no cursor moves in a log
        pass

    def close(self) -> None:
        if not self.disable and self.n != self._line_n:
            try:
                with self._lock:
                    self._write_line(self._clock())
            except ValueError:  # the stream is closed already
                pass
        self.sp = None  # tqdm's close then writes no '\n' / '\r' of its own
        super().close()


def bar(*args: Any, log_every_s: float = DEFAULT_LOG_EVERY_S, **kwargs: Any) -> tqdm:
    """``tqdm(*args, **kwargs)`` on a terminal; a :class:`LineBar` where the stream (``file``, default
    stderr) is not one.  On a terminal, in a worker, the bar is pinned to the worker's line and
    cleared when done.  ``log_every_s`` applies to the line form only (0: a line per unit)."""
    stream = kwargs.get("file") or sys.stderr
    if not is_terminal(stream) and not _in_notebook():
        return LineBar(*args, log_every_s=log_every_s, **kwargs)
    if _line is not None:
        kwargs["position"] = _line
        kwargs["leave"] = False
    return tqdm(*args, **kwargs)


def write(msg: str) -> None:
    """Print ``msg`` on stdout without breaking the bars (tqdm.write), flushed at once, so that in a log
    it stands between the progress lines written when it happened."""
    tqdm.write(msg)
    sys.stdout.flush()

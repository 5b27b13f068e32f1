"""Output folders: one run at a time (a lock file), and clear errors for a folder that cannot be used.

Every command that writes into ``--out`` (``train``, ``reproduce``) holds :func:`locked` on it for its
whole run.  The lock is ``fcntl.flock`` on ``OUT/.dlmlab.lock``: the kernel releases it when the
holding process ends in any way (``kill -9`` included), so a lock left by a dead process is simply
taken over, and a second run on the same folder gets :class:`OutDirBusy` naming the holder's PID.
Under ``torchrun`` only rank 0 takes the lock (the ranks of one run share the folder).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from dlmlab.errors import UserError

LOCK_NAME = ".dlmlab.lock"

# what the OS said -> (reason, what to do)
_WRITE_ERRNOS = {
    errno.ENOSPC: ("the disk is full", "free some space"),
    errno.EDQUOT: ("the disk quota is exceeded", "free some space"),
    errno.EROFS: ("the file system is read-only", "make it writable"),
    errno.EACCES: ("permission denied", "make it writable"),
    errno.EPERM: ("operation not permitted", "make it writable"),
}


class OutDirBusy(UserError):
    """Another process is writing into the same output folder."""


class OutDirError(UserError):
    """The output folder cannot be created or written (a file, read-only, full disk)."""


def _inside(name: str | os.PathLike | bytes, folder: str | Path) -> bool:
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    a, b = os.path.abspath(name), os.path.abspath(folder)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def write_error(e: OSError, path: str | Path | None = None) -> OutDirError | None:
    """A one-line :class:`OutDirError` for a full / read-only / forbidden disk under output folder
    ``path`` (any path when ``None``), else ``None`` (e.g. an unreadable input file is not about --out)."""
    if e.errno not in _WRITE_ERRNOS:
        return None
    if e.filename and path is not None and not _inside(e.filename, path):
        return None
    reason, todo = _WRITE_ERRNOS[e.errno]
    where = e.filename or path or "the output folder"
    return OutDirError(f"cannot write {where}: {reason}; {todo} or choose another --out")


@contextmanager
def write_errors(path: str | Path | None = None) -> Iterator[None]:
    """Turn a full / read-only disk under ``path`` (``OSError`` ENOSPC, EDQUOT, EROFS, EACCES, EPERM)
    into :class:`OutDirError`; other errors pass unchanged."""
    try:
        yield
    except OSError as e:
        err = write_error(e, path)
        if err is None:
            raise
        raise err from e


def prepare(path: str | Path) -> Path:
    """Create output folder ``path`` (and its parents); a clear :class:`UserError` when that cannot be."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutDirError(f"--out {path} is a file, not a folder; choose a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutDirError(f"cannot create folder {path}: a part of that path is a file; choose another --out") from None
    except OSError as e:
        err = write_error(e)  # (the failing part may be a parent folder)
        if err is None:
            raise
        raise err from None
    return path


def _is_main_rank() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


_held: dict[str, list] = {}  # real path of a lock file -> [fd, depth]; re-entrant within a process
_held_guard = threading.Lock()


def _holder(lock_path: Path) -> str:
    """``PID 123 (dlmlab train)`` from the lock file, as far as it can be read."""
    try:
        lines = lock_path.read_text().splitlines()
    except OSError:
        lines = []
    if not lines or not lines[0].strip().isdigit():
        return "another process"
    what = f" ({lines[1].strip()})" if len(lines) > 1 and lines[1].strip() else ""
    return f"PID {lines[0].strip()}{what}"


def _acquire(path: Path, lock_path: Path, command: str) -> int:
    """Open and flock ``lock_path``; the descriptor, or :class:`OutDirBusy`."""
    import fcntl

    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        err = write_error(e)
        if err is None:
            raise
        raise err from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutDirBusy(f"{path} is in use by {_holder(lock_path)}; wait for it or choose another --out") from None
        # A lock left by a dead process was released by the kernel: it is ours now.  Record who holds it.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{command}\n{time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def locked(path: str | Path, command: str = "dlmlab") -> Iterator[Path]:
    """Hold the lock on output folder ``path`` (created if needed) while the block runs.

    Raises :class:`OutDirBusy` at once when another live process holds it.  Re-entrant in one process
    (``reproduce all`` locks the folder, then a study may lock it again).  Only rank 0 locks under
    torchrun; where ``fcntl`` does not exist (Windows) nothing is locked.
    """
    path = prepare(path)
    try:
        import fcntl  # noqa: F401
    except ImportError:
        fcntl = None
    if not _is_main_rank() or fcntl is None:
        yield path
        return
    lock_path = path / LOCK_NAME
    key = os.path.realpath(lock_path)
    with _held_guard:  # (flock does not block, so holding the guard meanwhile is cheap)
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
        else:
            entry = _held[key] = [_acquire(path, lock_path, command), 1]
    try:
        yield path
    finally:
        with _held_guard:
            entry[1] -= 1
            last = entry[1] == 0
            if last:
                del _held[key]
        if last:
            try:
                os.ftruncate(entry[0], 0)  # no stale PID for a reader; the file itself stays (no unlink races)
            except OSError:
                pass
            os.close(entry[0])  # closing the descriptor releases the flock


def move_aside(path: str | Path, names: tuple[str, ...] | list[str]) -> Path | None:
    """Move the files / folders ``names`` of an earlier run in ``path`` into ``path/previous-<time>/``.

    Returns that folder, or ``None`` when there was nothing to move.  Each move is one rename, so a
    kill part-way leaves every file either in place or in the new folder, none lost.
    """
    path = Path(path)
    present = [n for n in names if (path / n).exists() or (path / n).is_symlink()]
    if not present:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = path / f"previous-{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = path / f"previous-{stamp}-{n}"
    dest.mkdir()
    for name in present:
        os.replace(path / name, dest / name)
    return dest

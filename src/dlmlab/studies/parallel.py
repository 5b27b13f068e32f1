"""Run a study's independent jobs (one small model each) on several worker processes.

The studies' small models train fastest on one torch thread, so a sequential study leaves all but one
core idle.  :func:`map_jobs` runs the jobs on ``workers`` one-thread processes instead.  Every job
seeds itself, and single-threaded CPU kernels are deterministic, so the results do not depend on the
number of workers (tests check this).  Under ``torchrun`` the ranks already share the work, so
:func:`default_workers` is 1 there.

Workers end with the process that started them, however it ends (``kill -9`` included): on Linux
the kernel sends them SIGKILL when it dies (``prctl(PR_SET_PDEATHSIG)``), and everywhere a watcher
thread exits a worker whose parent has gone.  The multiprocessing resource tracker then sees its
last client go and exits too, so nothing is left holding the dead run's terminal or output pipes.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from dlmlab.errors import UserError
from dlmlab.progress import bar, set_worker_line

ENV_WORKERS = "DLMLAB_WORKERS"


class WorkersSettingError(UserError, ValueError):
    """``$DLMLAB_WORKERS`` is not a whole number >= 1."""


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(device: str = "cpu") -> int:
    """``$DLMLAB_WORKERS`` if set, else 1 on a GPU (``device`` cuda / auto with CUDA present) or under
    ``torchrun`` (several ranks), else the number of usable cores."""
    env = os.environ.get(ENV_WORKERS, "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise WorkersSettingError(f"{ENV_WORKERS} must be a whole number >= 1, got {env!r}") from None
        if n < 1:
            raise WorkersSettingError(f"{ENV_WORKERS} must be >= 1, got {n}")
        return n
    import torch  # imported here: a worker imports this module first and must not wait for torch (see below)

    on_gpu = str(device).startswith("cuda") or (str(device) == "auto" and torch.cuda.is_available())
    if on_gpu or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return 1
    return available_cores()


PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """End this process when process ``parent`` (its parent) ends, also by ``kill -9``."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watcher below still works
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="dlmlab-parent-watch", daemon=True).start()


def _init_worker(counter, lock, first_line: int, threads: int, parent: int | None = None) -> None:
    # First thing in a new worker, before anything slow is imported (this module imports torch lazily):
    # a kill of the parent during the worker's start-up must not leave the worker behind.
    if parent is not None:
        die_with_parent(parent)
    with lock:
        counter.value += 1
        slot = counter.value
    tqdm.set_lock(lock)
    set_worker_line(first_line + slot - 1)
    if threads:
        import torch

        torch.set_num_threads(threads)


def map_jobs(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int, desc: str = "jobs",
             progress: bool = True, threads: int = 1) -> list:
    """``[fn(*job) for job in jobs]``, on up to ``workers`` processes; results in the order of ``jobs``.

    ``fn`` must be a module-level function and its arguments and results picklable (workers are
    spawned, not forked).  Each worker runs with ``threads`` torch threads (0 = an equal share of the
    cores).  With one worker the jobs run here, in this process, with ``threads`` torch threads too (0 =
    this process's setting), so a result does not depend on the worker count.
    The first failing job's exception is raised here after the pending jobs are cancelled; jobs that
    already finished keep whatever they wrote (checkpoints), so a re-run resumes.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    jobs = list(jobs)
    outer = bar(total=len(jobs), desc=desc, unit="job", disable=not progress, dynamic_ncols=True, leave=False,
                log_every_s=0)  # in a log: a line per finished job
    try:
        results: list = []
        if workers == 1 or len(jobs) <= 1:
            from dlmlab.studies.threads import torch_threads  # imports torch: kept out of the workers' start-up

            with torch_threads(threads):
                for job in jobs:
                    results.append(fn(*job))
                    outer.update(1)
            return results
        n = min(workers, len(jobs))
        threads = threads or max(1, available_cores() // n)
        ctx = mp.get_context("spawn")
        counter, lock = ctx.Value("i", 0), ctx.RLock()
        first_line = outer.pos + 1 if progress else 0
        results = [None] * len(jobs)
        ex = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker,
                                 initargs=(counter, lock, first_line, threads, os.getpid()))
        try:
            futures = {ex.submit(fn, *job): i for i, job in enumerate(jobs)}
            pending = set(futures)
            while pending:
                # each job as it ends (FIRST_EXCEPTION would wait for all of them unless one fails)
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    if f.exception() is not None:
                        raise f.exception()
                    results[futures[f]] = f.result()
                    outer.update(1)
        except BaseException:
            _stop(ex)
            raise
        ex.shutdown(wait=True)
        return results
    finally:
        outer.close()


def _stop(ex: ProcessPoolExecutor) -> None:
    """Cancel pending jobs and end the running ones now (their last checkpoints stay on disk)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=10)

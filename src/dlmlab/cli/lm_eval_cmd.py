"""dlmlab lm-eval: run the lm-evaluation-harness with the ``dlmlab`` model on anything ``dlmlab.load`` opens.

``dlmlab lm-eval --model_args path=RUN[,step=N,mc_num=K,batch_size=B] --tasks TASKS [harness flags]``:
every flag is the harness's own (``lm-eval run --help``) and is passed through; ``--model dlmlab`` is
implied, and the dlmlab tasks (``dlmlab_wikitext2``, ``dlmlab_reversal_mc``, ``dlmlab_repeat_gen``) are
found without ``--include_path`` (a user's ``--include_path`` is searched as well).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
from pathlib import Path

from dlmlab.errors import UserError

DLMLAB_TASKS = ("dlmlab_wikitext2", "dlmlab_reversal_mc", "dlmlab_repeat_gen")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.allow_abbrev = False  # --model must not be read as an abbreviation of anything here
    p.usage = "dlmlab lm-eval --model_args path=RUN[,step=N,mc_num=K,batch_size=B,...] --tasks TASKS [harness flags]"
    p.epilog = ("model_args: path, step, mc_num, estimator (dlmlab | llada), llada_batch, batch_size, seed, "
                "greedy_check,\n  max_length, rolling_context, gen_steps, block_len, threshold, kv_reuse, order, "
                "temperature, max_gen_toks,\n  add_bos_token, dtype, device (docs/lm_eval.md)\n"
                "dlmlab tasks: dlmlab_wikitext2, dlmlab_reversal_mc, dlmlab_repeat_gen\n"
                "every other flag goes to the harness (see `lm-eval run --help`), e.g.\n"
                "  dlmlab lm-eval --model_args path=runs/mdlm,mc_num=32 --tasks dlmlab_reversal_mc --limit 50\n"
                "  dlmlab lm-eval --model_args path=runs/ar --tasks dlmlab_wikitext2,dlmlab_repeat_gen "
                "--output_path out/")
    p.set_defaults(_passthrough=True)


def harness_argv(extra: list[str]) -> list[str]:
    """The harness's ``run`` arguments for ``dlmlab lm-eval EXTRA``."""
    argv = list(extra)
    if not any(a in ("--model_args", "-a") or a.startswith("--model_args=") for a in argv):
        raise UserError("give --model_args path=RUN (a dlmlab run, checkpoint or Hugging Face folder)")
    for i, a in enumerate(argv):
        if a in ("--model", "-M") or a.startswith("--model="):
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            if value != "dlmlab":
                raise UserError(f"dlmlab lm-eval runs the dlmlab model; got --model {value!r} (use `lm-eval` for others)")
    if not any(a in ("--model", "-M") or a.startswith("--model=") for a in argv):
        argv = ["--model", "dlmlab"] + argv
    return argv


def run(args: argparse.Namespace) -> int:
    import dlmlab.lmeval  # noqa: F401  (registers the dlmlab model with the harness)
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    from dlmlab.lmeval import TASKS_DIR

    setup_logging()
    cli = HarnessCLI()
    ns = cli._parser.parse_args(["run"] + harness_argv(getattr(args, "_extra", [])))
    if not ns.tasks:
        raise UserError(f"give --tasks TASK[,TASK...] (dlmlab's: {', '.join(DLMLAB_TASKS)}; "
                        "`lm-eval ls tasks` lists the harness's own)")
    check_output_path(ns.output_path)
    # the dlmlab tasks beside the user's own (--include_path PATH)
    ns.include_path = [str(TASKS_DIR)] + ([ns.include_path] if ns.include_path else [])
    try:
        with _only_dlmlab_tasks(ns):
            cli.execute(ns)
    except ValueError as e:
        if not str(e).startswith("Tasks not found"):
            raise
        raise UserError(_unknown_tasks_message(str(e), ns.include_path)) from None
    _write_standard_errors(ns.output_path)
    return 0


def _unknown_tasks_message(harness_msg: str, include_path: list[str]) -> str:
    """The harness's "Tasks not found: a, b" as one line, with the closest known names of the dlmlab tasks
    and the user's --include_path (the harness's own thousands are not indexed again for this)."""
    import difflib

    from lm_eval.tasks import TaskManager

    missing = [t.strip() for t in harness_msg.split(":", 1)[1].split(",") if t.strip()]
    known = TaskManager(include_path=include_path, include_defaults=False).all_tasks
    close = sorted({m for t in missing for m in difflib.get_close_matches(t, known, n=2, cutoff=0.75)})
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (f"unknown task{'s' if len(missing) > 1 else ''} {', '.join(missing)} (--tasks); {hint}dlmlab's: "
            f"{', '.join(DLMLAB_TASKS)}; `lm-eval ls tasks` lists the harness's own; a task YAML of yours "
            "needs --include_path FOLDER")


def _results_folder(output_path: str) -> Path:
    """Where the harness writes (under) for ``--output_path``: the folder, or a ``.json`` file's folder."""
    out = Path(output_path)
    return out.parent if out.suffix == ".json" else out


def check_output_path(output_path: str | None) -> None:
    """Refuse an ``--output_path`` the results could not be written to, before the first forward: one under a
    file, or in a folder that is not writable (read-only disk, no permission).  Creates nothing."""
    if not output_path:
        return
    folder = _results_folder(output_path)
    probe = folder.absolute()
    while not probe.exists():
        if probe.is_symlink():  # a dangling link
            raise UserError(f"--output_path {output_path}: {probe} is a broken link")
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"--output_path {output_path}: {probe} is a file, not a folder; choose another path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"--output_path {output_path}: {probe} is not writable (read-only disk or no permission); "
                        "choose another path")


def _write_standard_errors(output_path: str | None) -> None:
    """``dlmlab_standard_errors.json`` beside the harness's results (``--output_path``): every estimate's
    standard error (0 for AR models, which are scored exactly)."""
    from dlmlab.files import atomic_write_text
    from dlmlab.lmeval import DlmlabLM

    if not output_path or DlmlabLM.last is None:
        return
    folder = _results_folder(output_path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / "dlmlab_standard_errors.json",
                          json.dumps(DlmlabLM.last.se_report(), indent=1, allow_nan=False))
    except OSError as e:
        raise UserError(f"--output_path {output_path}: cannot write dlmlab_standard_errors.json "
                        f"({e.strerror or e}); the harness's results are in {folder}") from None


@contextlib.contextmanager
def _only_dlmlab_tasks(ns: argparse.Namespace):
    """When every task asked for is found in the dlmlab tasks folder or the user's --include_path, the
    harness's task index covers only those folders: indexing its thousands of built-in YAMLs takes tens
    of seconds on a small machine and would find nothing needed."""
    from lm_eval.tasks import TaskManager

    names = [t for task in (ns.tasks or []) for t in str(task).split(",") if t]
    known = TaskManager(include_path=ns.include_path, include_defaults=False).all_tasks if names else []
    if not names or not all(n in known for n in names):
        yield
        return
    init = TaskManager.__init__
    TaskManager.__init__ = functools.partialmethod(init, include_defaults=False)
    try:
        yield
    finally:
        TaskManager.__init__ = init

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
from pathlib import Path

from dlmlab.errors import UserError

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.allow_abbrev = False  # --model must not be read as an abbreviation of anything here
    p.usage = "dlmlab lm-eval --model_args path=RUN[,step=N,mc_num=K,batch_size=B,...] --tasks TASKS [harness flags]"
    p.epilog = ("model_args: path, step, mc_num, estimator (dlmlab | llada), llada_batch, batch_size, seed, "
                "greedy_check,\n  max_length, rolling_context, gen_steps, block_len, threshold, cache, order, "
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
    # the dlmlab tasks beside the user's own (--include_path PATH)
    ns.include_path = [str(TASKS_DIR)] + ([ns.include_path] if ns.include_path else [])
    with _only_dlmlab_tasks(ns):
        cli.execute(ns)
    _write_standard_errors(ns.output_path)
    return 0


def _write_standard_errors(output_path: str | None) -> None:
    """``dlmlab_standard_errors.json`` beside the harness's results (``--output_path``): every estimate's
    standard error (0 for AR models, which are scored exactly)."""
    from dlmlab.files import atomic_write_text
    from dlmlab.lmeval import DlmlabLM

    if not output_path or DlmlabLM.last is None:
        return
    out = Path(output_path)
    folder = out.parent if out.suffix == ".json" else out
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "dlmlab_standard_errors.json", json.dumps(DlmlabLM.last.se_report(), indent=1))


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

"""`dlmlab` command line: one module per sub-command, each with add_arguments() and run()."""

from __future__ import annotations

import argparse
import importlib
import sys

from dlmlab import __version__

COMMANDS = {
    "train": "train an LM of any family (AR or masked diffusion) from a YAML config",
    "eval": "evaluate a run's latest checkpoint or a Hugging Face model on held-out text",
    "reproduce": "reproduce a study (induction, reversal, state, prediff, all) at a preset",
    "compare": "print how two reproduction runs' results and claims (or two training runs) differ",
    "rate": "serve a blind pairwise preference page for samples (`dlmlab sample --out` files)",
    "sample": "sample text from a run: masked-diffusion decoding (orders, blocks, KV reuse, infilling) or AR",
    "lm-eval": "run the lm-evaluation-harness on a run or Hugging Face folder (harness flags pass through)",
    "zoo": "list the trained models the package ships (load one with dlmlab.load(\"zoo:NAME\"))",
}

EPILOG = """examples:
  dlmlab train configs/shakespeare_mdlm.yaml --out runs/mdlm
  dlmlab eval runs/mdlm
  dlmlab sample runs/mdlm --prompt "ROMEO:" --threshold 0.9 --block-len 16
  dlmlab reproduce reversal --preset smoke --out runs/reversal
  dlmlab reproduce all --preset cpu --out runs/all
  torchrun --nproc_per_node 2 -m dlmlab.cli.main train configs/shakespeare_ar.yaml --out runs/ar2

new here: docs/tutorial.md (train, sample, load, analyse, evaluate); every config field: docs/config_reference.md
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps sub-command names and their help on one line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction) and action.choices:
            longest = max(len(n) for n in action.choices) + self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, longest)


_formatter = _Formatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlmlab",
        description="Train, sample and analyse masked-diffusion LMs beside AR, SSM and RNN models.",
        epilog=EPILOG + "\nrun `dlmlab COMMAND --help` for a command's options.\n",
        formatter_class=_formatter,
    )
    parser.add_argument("--version", action="version", version=f"dlmlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        try:
            mod = importlib.import_module(f"dlmlab.cli.{name.replace('-', '_')}_cmd")
        except ModuleNotFoundError as e:
            if e.name == f"dlmlab.cli.{name.replace('-', '_')}_cmd":
                continue
            raise
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=_formatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command.  Bad input (a :class:`~dlmlab.errors.UserError`, a full or read-only disk)
    prints ``dlmlab COMMAND: error: ...`` on one line and returns 2, as argparse does for bad
    arguments; any other exception propagates with its traceback (exit code 1)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "_passthrough", False):  # only a pass-through command (lm-eval) takes them
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args._extra = extra
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    from dlmlab.errors import user_message

    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"dlmlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a user error is one line and exit code 2; anything else is a bug: traceback
        msg = user_message(e)
        if msg is None:
            raise
        print(f"dlmlab {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""``dlmlab zoo``: the models the project trained itself and ships, with what each one shows."""

from __future__ import annotations

import argparse

HELP_EPILOG = """load one with dlmlab.load("zoo:NAME") in Python (or pass zoo:NAME wherever a run folder is
accepted); `make zoo` retrains every entry from its recorded command (docs/zoo.md)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="show one entry in full (its command, commit, curve and measurements)")
    p.epilog = HELP_EPILOG


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def run(args: argparse.Namespace) -> int:
    from dlmlab.zoo import entries, entry

    if args.name:
        e = entry(args.name)
        print(f"zoo:{e.name}\n  {e.description}\n  trained by: {' '.join(e.command)}"
              f"{'' if e.run in ('.', '') else f'  (run folder {e.run})'}\n  commit: {e.commit}  on {e.trained}"
              f"  wall time: {_fmt(e.wall_time_s)} s\n  folder: {e.path}\n  shows:")
        for k, v in e.shows.items():
            print(f"    {k} = {_fmt(v)}")
        return 0
    es = entries()
    if not es:
        print("the zoo is empty in this installation (`make zoo` builds it)")
        return 0
    for e in es:
        shows = ", ".join(f"{k} {_fmt(v)}" for k, v in e.shows.items())
        print(f"zoo:{e.name}\n    {e.description}\n    shows: {shows}")
    return 0

"""dlmlab rate DIR_OR_FILE... [--port P] [--db FILE] [--report]: blind pairwise preference rating of samples.

Each argument is a folder with ``samples.jsonl`` (lines ``{prompt, method, sample}``) or a JSONL file: such a
file, or one written by ``dlmlab sample --out`` (its records are named by the decoding settings that differ
among them; with several files, by the file name first), so samples of two sampling runs are rated with
``dlmlab rate a.jsonl b.jsonl``.

Serves http://127.0.0.1:P/ (local only): two anonymised samples per prompt from different methods,
random left/right order; choices go to SQLite (default DIR/ratings.sqlite).  ``--report`` prints the
win rates per method instead of serving.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlmlab.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR_OR_FILE", nargs="+",
                   help="folder with samples.jsonl (lines {prompt, method, sample}), such a file, or the files "
                        "`dlmlab sample --out` wrote (one per method: rated against each other)")
    p.add_argument("--port", type=int, default=8765, help="local port (default 8765; 0 = any free port)")
    p.add_argument("--db", default=None,
                   help="SQLite file for the choices (default: ratings.sqlite beside the first samples file)")
    p.add_argument("--report", action="store_true", help="print the win rates per method and exit")
    p.add_argument("--seed", type=int, default=None, help="seed for pair order and sides (default: random)")


def run(args: argparse.Namespace) -> int:
    from dlmlab.rating import RatingStore, find_samples, format_win_rates

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    files = [find_samples(d) for d in args.dir]
    samples = files if len(files) > 1 else files[0]
    db = Path(args.db) if args.db else files[0].parent / "ratings.sqlite"
    if args.report:
        if not db.exists():
            raise UserError(f"no ratings database at {db} (rate first: dlmlab rate {' '.join(args.dir)})")
        print(format_win_rates(RatingStore(db)))
        return 0

    from dlmlab.rating.server import make_server

    try:
        server = make_server(samples, db, args.port, args.seed)
    except OSError as e:
        raise UserError(f"cannot listen on 127.0.0.1:{args.port}: {e.strerror or e}; choose another --port") from None
    host, port = server.server_address[:2]
    app = server.app  # type: ignore[attr-defined]
    print(f"rating {len(app.pairs)} pairs from {', '.join(map(str, files))}\nchoices -> {db}\n"
          f"open http://{host}:{port}/   (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print()
    print(format_win_rates(app.store))
    return 0

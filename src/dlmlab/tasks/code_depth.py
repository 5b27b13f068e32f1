"""Code-Depth: nesting depth of every token of real Python source.

Source: the running interpreter's own standard library (``sysconfig.get_paths()['stdlib']``,
top-level ``*.py`` files), read in place and never copied.  Files are split into
train / test *by file* (every ``test_every``-th file, in sorted order, is a test file).

Tokens come from :mod:`tokenize` and map to a small fixed vocabulary (``VOCAB``):
keywords, operators, ``INDENT`` / ``DEDENT`` / ``NEWLINE``, a few frequent names, and
buckets ``NAME`` / ``NUMBER`` / ``STRING`` / ``OTHER`` for everything else (comments and
blank-line ``NL`` tokens are dropped).  The label of a token is the depth *after* it:
indentation level (``INDENT`` +1, ``DEDENT`` -1) plus bracket depth (``( [ {`` +1,
``) ] }`` -1), clipped to ``max_depth``.  Windows start only where the depth is 0,
so the label is a function of the window's own prefix (as for Dyck).
"""

from __future__ import annotations

import io
import sysconfig
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from dlmlab.config import require

KEYWORDS = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
    "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
    "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
]
OPERATORS = [
    "!=", "%", "%=", "&", "&=", "(", ")", "*", "**", "**=", "*=", "+", "+=", ",", "-", "-=", "->", ".",
    "...", "/", "//", "//=", "/=", ":", ":=", ";", "<", "<<", "<<=", "<=", "=", "==", ">", ">=", ">>",
    ">>=", "@", "@=", "[", "]", "^", "^=", "{", "|", "|=", "}", "~",
]
FREQUENT_NAMES = ["self", "cls", "len", "isinstance", "str", "int", "list", "dict", "range", "super", "__init__"]
SPECIAL = ["NAME", "NUMBER", "STRING", "NEWLINE", "INDENT", "DEDENT", "OTHER"]
VOCAB: list[str] = SPECIAL + KEYWORDS + OPERATORS + FREQUENT_NAMES
TOKEN_ID = {s: i for i, s in enumerate(VOCAB)}
OPEN, CLOSE = set("([{"), set(")]}")
# depth change of each depth-changing token, and the token that changes it the other way
STEP = {"INDENT": 1, "DEDENT": -1, "(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
OPPOSITE = {"INDENT": "DEDENT", "DEDENT": "INDENT", "(": ")", ")": "(", "[": "]", "]": "[", "{": "}", "}": "{"}
_STEP_OF_ID = torch.tensor([STEP.get(v, 0) for v in VOCAB], dtype=torch.long)
_OPPOSITE_ID = torch.tensor([TOKEN_ID[OPPOSITE[v]] if v in OPPOSITE else i for i, v in enumerate(VOCAB)],
                            dtype=torch.long)
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


def stdlib_files() -> list[Path]:
    """Top-level ``*.py`` files of this interpreter's standard library, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    if not files:
        raise FileNotFoundError(f"no .py files in the standard library directory {root}")
    return files


def encode_source(source: str, max_depth: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """Python source -> (token ids [N], depth after each token [N]); raises SyntaxError-like errors."""
    ids, depths = [], []
    indent = bracket = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _SKIP:
            continue
        if tok.type == tokenize.INDENT:
            indent += 1
            name = "INDENT"
        elif tok.type == tokenize.DEDENT:
            indent -= 1
            name = "DEDENT"
        elif tok.type == tokenize.NEWLINE:
            name = "NEWLINE"
        elif tok.type == tokenize.OP:
            if tok.string in OPEN:
                bracket += 1
            elif tok.string in CLOSE:
                bracket -= 1
            name = tok.string if tok.string in TOKEN_ID else "OTHER"
        elif tok.type == tokenize.NAME:
            name = tok.string if tok.string in TOKEN_ID else "NAME"
        elif tok.type == tokenize.NUMBER:
            name = "NUMBER"
        elif tok.type in (tokenize.STRING,) or tokenize.tok_name[tok.type].startswith("FSTRING"):
            name = "STRING"
        else:
            name = "OTHER"
        ids.append(TOKEN_ID[name])
        depths.append(min(max(indent + bracket, 0), max_depth))
    return np.asarray(ids, dtype=np.int64), np.asarray(depths, dtype=np.int64)


@dataclass
class CodeDepthTask:
    """Windows of tokenized stdlib files; ``split`` chooses train or test files.

    ``max_files`` caps the number of files read per split (0 = all), evenly spaced
    over the sorted list, to keep small presets fast.
    """

    max_depth: int = 15
    test_every: int = 5
    max_files: int = 0
    name: str = "code_depth"
    _data: dict = field(default_factory=dict, init=False, repr=False)
    _starts: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        require(self.max_depth >= 1, f"code_depth.max_depth must be >= 1, got {self.max_depth}")
        require(self.test_every >= 2, f"code_depth.test_every must be >= 2, got {self.test_every}")
        require(self.max_files >= 0, f"code_depth.max_files must be >= 0, got {self.max_files}")

    @property
    def vocab_size(self) -> int:
        return len(VOCAB)

    @property
    def n_classes(self) -> int:
        return self.max_depth + 1

    def files(self, split: str) -> list[Path]:
        require(split in ("train", "test"), f"code_depth split must be 'train' or 'test', got {split!r}")
        all_files = stdlib_files()
        chosen = [f for i, f in enumerate(all_files) if (i % self.test_every == self.test_every - 1) == (split == "test")]
        if self.max_files and len(chosen) > self.max_files:
            idx = np.linspace(0, len(chosen) - 1, self.max_files).round().astype(int)
            chosen = [chosen[i] for i in sorted(set(idx.tolist()))]
        return chosen

    def encoded(self, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per file (ids [N], depth [N]); files that fail to tokenize are skipped."""
        if split not in self._data:
            out = []
            for f in self.files(split):
                try:
                    out.append(encode_source(f.read_text(encoding="utf-8"), self.max_depth))
                except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, IndentationError):
                    continue
            require(bool(out), f"code_depth: no {split} file could be tokenized")
            self._data[split] = out
        return self._data[split]

    def starts(self, split: str, length: int) -> np.ndarray:
        """[M, 2] (file index, start) of every window of ``length`` that starts at depth 0."""
        key = (split, length)
        if key not in self._starts:
            rows = []
            for fi, (ids, depth) in enumerate(self.encoded(split)):
                ok = np.flatnonzero(np.concatenate([[0], depth[:-1]]) == 0)
                ok = ok[ok + length <= len(ids)]
                rows.append(np.stack([np.full(len(ok), fi), ok], 1))
            arr = np.concatenate(rows) if rows else np.zeros((0, 2), dtype=np.int64)
            require(len(arr) > 0, f"code_depth: no {split} window of length {length}")
            self._starts[key] = arr
        return self._starts[key]

    def sample(self, batch: int, length: int, gen: torch.Generator | None = None,
               split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """-> tokens [B,T] long in [0, len(VOCAB)), labels [B,T] long in [0, max_depth]."""
        require(batch > 0 and length > 0, f"code_depth: batch and length must be > 0, got {batch}, {length}")
        starts = self.starts(split, length)
        pick = torch.randint(0, len(starts), (batch,), generator=gen).numpy()
        data = self.encoded(split)
        toks = np.stack([data[f][0][s:s + length] for f, s in starts[pick]])
        labs = np.stack([data[f][1][s:s + length] for f, s in starts[pick]])
        return torch.from_numpy(toks), torch.from_numpy(labs)

    def labels(self, tokens: torch.Tensor) -> torch.Tensor:
        """Depth after each token of a window that starts at depth 0, [B,T] -> [B,T]: the running sum of
        the depth steps (``STEP``), clipped to ``[0, max_depth]`` (equal to :meth:`sample`'s labels)."""
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= len(VOCAB)):
            raise ValueError(f"code_depth tokens must be in [0, {len(VOCAB)})")
        return _STEP_OF_ID[tokens.long()].cumsum(-1).clamp(0, self.max_depth)

    def corrupt(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Replace the depth-changing token at ``pos`` by the one changing depth the other way (``INDENT``
        <-> ``DEDENT``, ``(`` <-> ``)``, ...): every depth from ``pos`` on moves by 2.  Other tokens are
        left as they are (such rows are not :meth:`corruptible`)."""
        out = tokens.clone()
        out[:, pos] = _OPPOSITE_ID[out[:, pos].long()]
        return out

    def corruptible(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """[B] bool: rows where the token at ``pos`` changes depth, and the clean and corrupted running
        depths stay in ``[0, max_depth]`` without clipping (so both label sequences are exact)."""
        steps = _STEP_OF_ID[tokens.long()]
        clean = steps.cumsum(-1)
        corr = _STEP_OF_ID[self.corrupt(tokens, pos).long()].cumsum(-1)
        ok = steps[:, pos] != 0
        for d in (clean, corr):
            ok &= (d.min(-1).values >= 0) & (d.max(-1).values <= self.max_depth)
        return ok

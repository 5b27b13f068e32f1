"""Zero-shot LAMBADA-style last-word accuracy (only when the data is present locally).

The file is either JSONL with a ``text`` field per passage (the ``lambada_openai``
format) or plain text with one passage per line.  A passage counts as correct
when the tokens of its last word, predicted from the context alone (greedy), are
exactly the reference tokens.  Nothing is downloaded: :func:`find_lambada`
returns ``None`` when no local copy exists, and callers report the metric as skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

from dlmlab.data.paths import DataNotFound, data_root

CANDIDATES = ("lambada/lambada_test.jsonl", "lambada/test.jsonl", "lambada/lambada_test_plain_text.txt", "lambada/test.txt")


def find_lambada() -> Path | None:
    """A local LAMBADA file under the offline data folder, or None."""
    try:
        root = data_root()
    except DataNotFound:
        return None
    for c in CANDIDATES:
        if (root / c).exists():
            return root / c
    return None


def read_passages(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"LAMBADA file not found: {path}")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if path.suffix == ".jsonl":
        try:
            return [json.loads(ln)["text"] for ln in lines]
        except (json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{path}: expected JSONL with a 'text' field ({e})") from None
    return lines


def split_last_word(text: str) -> tuple[str, str]:
    """'... the last word' -> ('... the', ' word') (the word keeps its leading space, as BPE sees it)."""
    text = text.rstrip()
    cut = text.rfind(" ")
    if cut <= 0:
        raise ValueError(f"passage has no context before its last word: {text[:40]!r}")
    return text[:cut], text[cut:]


def last_word_accuracy(predict: Callable[[torch.Tensor, int], torch.Tensor], tokenizer, passages: list[str],
                       limit: int | None = None, max_context: int | None = None) -> dict:
    """``predict(context_ids [1,P], n) -> n predicted ids [n]`` -> {accuracy, n}.

    Any model fits (AR greedy decoding, or diffusion sampling with temperature 0).
    """
    correct = total = 0
    for text in passages[:limit]:
        ctx, word = split_last_word(text)
        c_ids, w_ids = tokenizer.encode(ctx), tokenizer.encode(word)
        if max_context is not None:
            c_ids = c_ids[-max_context:]
        if not c_ids or not w_ids:
            continue
        pred = predict(torch.tensor([c_ids]), len(w_ids))
        correct += int(pred.tolist() == w_ids)
        total += 1
    return {"accuracy": correct / total if total else None, "n": total}

"""Offline datasets of the dlmlab harness tasks, read from the offline data folder (``$DLMLAB_DATA`` or
``shared/data`` beside the checkout, resolved by :func:`dlmlab.data.paths.data_root`).

Each loader is a task YAML's ``custom_dataset`` hook: the harness calls it with the run's metadata
(``--metadata`` and the model arguments) as keyword arguments, which are ignored here, and gets a
``datasets.DatasetDict`` built in memory (nothing is downloaded).
"""

from __future__ import annotations

import re

N_CHOICES = 4  # answer choices per reversal question (the true name and the next distinct names)
_HEADING = re.compile(r"^ = [^=].* = $")


def _dataset(rows: list[dict]):
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def wikitext_pages(text: str) -> list[str]:
    """WikiText articles: the text split before each top-level `` = Title = `` heading line."""
    pages, cur = [], []
    for line in text.splitlines(keepends=True):
        if _HEADING.match(line.rstrip("\n")) and any(x.strip() for x in cur):
            pages.append("".join(cur).strip("\n"))
            cur = []
        cur.append(line)
    if any(x.strip() for x in cur):
        pages.append("".join(cur).strip("\n"))
    return pages


def wikitext2(split: str = "test", **_metadata):
    """``dlmlab_wikitext2``: one document per WikiText-2 article (``split``: test or valid), field ``page``."""
    from dlmlab.data.paths import resolve_text

    text = resolve_text(f"wikitext2-{split}").read_text(encoding="utf-8")
    return _dataset([{"page": p} for p in wikitext_pages(text)])


def _names() -> tuple[list[str], list[str]]:
    from dlmlab.tasks.relations import load_person_description

    facts = load_person_description("p2d_reverse_prompts_test")
    return facts.prompts, [c.strip() for c in facts.completions]


def reversal_mc(**_metadata):
    """``dlmlab_reversal_mc``: a description-first prompt, four names (the true one first among the
    distinct names in file order, then the next ones cyclically); ``label`` is the true name's index after
    a deterministic rotation (so the answer is not always first)."""
    prompts, names = _names()
    distinct = list(dict.fromkeys(names))
    rows = []
    for i, (p, n) in enumerate(zip(prompts, names)):
        k = distinct.index(n)
        choices = [distinct[(k + j) % len(distinct)] for j in range(min(N_CHOICES, len(distinct)))]
        r = i % len(choices)
        choices = choices[-r:] + choices[:-r] if r else choices
        rows.append({"prompt": p, "choices": choices, "label": choices.index(n)})
    return _dataset(rows)


def repeat_gen(**_metadata):
    """``dlmlab_repeat_gen``: ``Repeat: NAME`` then ``Again:``; the answer is the name (exact match)."""
    _, names = _names()
    return _dataset([{"name": n, "prompt": f"Repeat: {n}\nAgain:"} for n in dict.fromkeys(names)])

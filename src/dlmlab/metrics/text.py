"""Sample-diversity metrics: Rep-n (repeated n-grams within a sample) and Self-BLEU (across samples)."""

from __future__ import annotations

from typing import Sequence


def rep_n(samples: Sequence[Sequence], n: int = 4) -> float:
    """Mean over samples of ``1 - distinct n-grams / n-grams`` (Welleck et al. 2020); samples are token lists.

    0 = no n-gram repeats inside a sample; samples shorter than ``n`` are skipped.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    vals = []
    for s in samples:
        grams = [tuple(s[i:i + n]) for i in range(len(s) - n + 1)]
        if grams:
            vals.append(1.0 - len(set(grams)) / len(grams))
    if not vals:
        raise ValueError(f"no sample has at least {n} tokens")
    return sum(vals) / len(vals)


def self_bleu(texts: Sequence[str], max_refs: int | None = None) -> float:
    """Mean sacrebleu sentence BLEU (0-100) of each text against all the others (Zhu et al. 2018).

    High = samples resemble each other (low diversity).  ``max_refs`` caps the references per text.
    """
    from sacrebleu.metrics import BLEU

    if len(texts) < 2:
        raise ValueError("self_bleu needs at least two texts")
    bleu = BLEU(effective_order=True)
    scores = []
    for i, hyp in enumerate(texts):
        refs = [t for j, t in enumerate(texts) if j != i]
        if max_refs is not None:
            refs = refs[:max_refs]
        scores.append(bleu.sentence_score(hyp, refs).score)
    return sum(scores) / len(scores)

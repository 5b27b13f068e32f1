"""Small helpers shared by tests that write a run config and train through `dlmlab train` or a study."""

from __future__ import annotations

import dataclasses

CORPUS = "The cat sat on the mat. The dog ran to it. " * 30


def write_run_cfg(tmp_path, objective="ar", family="transformer", steps=3, train_extra=""):
    """A `dlmlab train` config (a tiny model of ``family`` on :data:`CORPUS`, seq_len 16) in ``tmp_path``."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    model = "{family: %s, d_model: 16, n_layers: 1%s}" % (
        family, ", n_heads: 2, max_seq_len: 32" + (", attn_mask: bidirectional" if objective == "mdlm" else "")
        if family == "transformer" else "")
    cfg = tmp_path / f"{family}_{objective}.yaml"
    cfg.write_text(f"objective: {objective}\nmodel: {model}\ndata: {{source: {corpus}, seq_len: 16}}\n"
                   f"train: {{steps: {steps}, batch_size: 4, progress: false{train_extra}}}\neval_batches: 1\n")
    return cfg


def write_corpus(tmp_path):
    """A small lower-case text corpus, ``tmp_path / "c.txt"``."""
    p = tmp_path / "c.txt"
    p.write_text("the cat sat on the mat. the dog ran to it. " * 40)
    return p


def induction_preset(**kw):
    """The induction study's smoke preset, small and on the CPU, with fields ``kw`` replaced."""
    from dlmlab.studies.induction.presets import PRESETS

    return dataclasses.replace(PRESETS["smoke"], max_chars=20000, ckpt_every=0, device="cpu", **kw)

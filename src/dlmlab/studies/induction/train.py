"""Training the matched AR / masked-diffusion attention-only pairs with the toolkit loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from dlmlab.data.corpus import tokenise_corpus
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ar_loss, mdlm_loss
from dlmlab.objectives.schedule import sample_t
from dlmlab.studies.induction.presets import InductionPreset
from dlmlab.tasks.repeated import RepeatedVocab, mixed_batch
from dlmlab.training import TrainConfig, train

OBJECTIVES = ("ar", "dlm")


@dataclass
class Data:
    text_ids: torch.Tensor  # [N] training split of the natural text
    vocab: RepeatedVocab
    lo: int  # repeated random tokens are drawn from ids [lo, hi)
    hi: int
    val_ids: torch.Tensor | None = None  # [M] held-out text (probes, head scores on text)
    files: tuple[str, ...] = ()  # the corpus files read


def load_data(p: InductionPreset) -> Data:
    c = tokenise_corpus(p.text_source, p.tokenizer, p.bpe_vocab, max_chars=p.max_chars or None,
                        text_field=p.text_field)
    n_tok = c.tokenizer.vocab_size
    v = RepeatedVocab(n_tok, p.n_random)
    lo, hi = (0, n_tok) if p.random_ids == "text" else (v.lo, v.hi)
    if p.random_ids == "text" and n_tok < p.seq_len // 2:
        raise ValueError(f"text vocabulary ({n_tok}) is smaller than seq_len/2 = {p.seq_len // 2}")
    return Data(c.train, v, lo, hi, c.val, tuple(c.files))


def p_repeated_at(p: InductionPreset, step: int) -> float:
    """The curriculum: text only for the first ``text_steps`` steps, then ``p_repeated`` repeat rows."""
    return 0.0 if step < p.text_steps else p.p_repeated


def text_epochs(p: InductionPreset, n_text_tokens: int) -> float:
    """Expected passes over the training text: text rows x seq_len / corpus tokens."""
    rows = p.text_steps * p.batch_size + (p.steps - p.text_steps) * p.batch_size * (1 - p.p_repeated)
    return rows * p.seq_len / max(1, n_text_tokens)


def model_config(p: InductionPreset, vocab: RepeatedVocab, n_layers: int, objective: str) -> TransformerConfig:
    """Same shape for both objectives; only the attention mask differs."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return TransformerConfig(vocab_size=vocab.model_vocab, d_model=p.d_model, n_layers=n_layers, n_heads=p.n_heads,
                             d_mlp=0, attn_mask="causal" if objective == "ar" else "bidirectional",
                             max_seq_len=p.seq_len, positions=p.positions)


def train_config(p: InductionPreset, progress: bool) -> TrainConfig:
    return TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr, warmup_steps=min(p.warmup_steps, p.steps),
                       weight_decay=p.weight_decay, schedule=p.schedule, seed=p.seed, log_every=max(1, p.steps // 50),
                       ckpt_every=p.ckpt_every, keep_checkpoints=0, progress=progress)


def train_model(p: InductionPreset, data: Data, n_layers: int, objective: str, out: Path | None,
                progress: bool = True) -> tuple[Transformer, list[dict]]:
    """Train one model (AR: next-token loss, causal; DLM: MDLM loss, bidirectional) -> (model, metric rows)."""
    torch.manual_seed(p.seed)
    dev = p.torch_device()
    model = Transformer(model_config(p, data.vocab, n_layers, objective)).to(dev)
    v = data.vocab
    T = p.seq_len

    def make_batch(step: int, gen: torch.Generator) -> dict:
        x = mixed_batch(data.text_ids, p.batch_size, T, p_repeated_at(p, step), data.lo, data.hi, gen, p.min_half)
        if objective == "ar":
            return {"tokens": x.to(dev)}
        t = p.t_min + (p.t_max - p.t_min) * sample_t(p.batch_size, gen, eps=0.0)  # antithetic U[t_min, t_max]
        batch = {"tokens": x, "t": t, "noise": torch.rand(x.shape, generator=gen)}
        return {k: t.to(dev) for k, t in batch.items()}

    def loss_fn(m, batch):
        if objective == "ar":
            return ar_loss(m, batch["tokens"])
        return mdlm_loss(m, batch["tokens"], v.mask_id, t=batch["t"], noise=batch["noise"])

    hist = train(model, train_config(p, progress), make_batch, loss_fn, out_dir=out, desc=f"{objective} L{n_layers}")
    return model, hist

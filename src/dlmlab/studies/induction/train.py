"""Training the matched AR / masked-diffusion attention-only pairs with the toolkit loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from dlmlab.data.corpus import tokenise_corpus
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ARObjective, CardObjective, LinearSchedule, MaskedDiffusionObjective
from dlmlab.studies.induction.presets import InductionPreset
from dlmlab.tasks.repeated import RepeatedVocab, mixed_batch
from dlmlab.training import TrainConfig, train

#: the study's two objectives by their label (the results' keys ``ar_L2`` / ``dlm_L2``, the run folders and the
#: ``objective`` field of each model's results): AR next-token, and MDLM (default linear schedule, weight 1/t)
#: with mask rates drawn antithetically on ``[t_min, t_max]``
BUILDERS: dict[str, Callable[[InductionPreset, RepeatedVocab], CardObjective]] = {
    "ar": lambda p, vocab: ARObjective(),
    "dlm": lambda p, vocab: MaskedDiffusionObjective(vocab.mask_id, LinearSchedule(), t_range=(p.t_min, p.t_max)),
}
OBJECTIVES = tuple(BUILDERS)


@dataclass(frozen=True)
class StudyObjective:
    """One of the study's objectives: ``label`` names its results and run folders, ``objective`` trains the model
    and is what the analyses ask (whether it masks, its mask id)."""

    label: str
    objective: CardObjective

    @property
    def masked(self) -> bool:
        """The model fills in masked positions from both sides (bidirectional attention, masked evaluation rows);
        else it predicts the next token from the left (causal attention)."""
        return bool(self.objective.denoises)

    @property
    def mask_id(self) -> int | None:
        """The mask token's id (None for a next-token objective)."""
        return self.objective.mask_id

    @property
    def context(self) -> str:
        """The context of the model's headline accuracy: ``both`` sides for a masked model, ``left`` otherwise."""
        return "both" if self.masked else "left"


@dataclass
class Data:
    text_ids: torch.Tensor  # [N] training split of the natural text
    vocab: RepeatedVocab
    lo: int  # repeated random tokens are drawn from ids [lo, hi)
    hi: int
    val_ids: torch.Tensor | None = None  # [M] held-out text (probes, head scores on text)
    files: tuple[str, ...] = ()  # the corpus files read
    tokenizer: object = None  # the text tokenizer (saved beside each run's weights)


def load_data(p: InductionPreset) -> Data:
    c = tokenise_corpus(p.text_source, p.tokenizer, p.bpe_vocab, max_chars=p.max_chars or None,
                        text_field=p.text_field)
    n_tok = c.tokenizer.vocab_size
    v = RepeatedVocab(n_tok, p.n_random)
    lo, hi = (0, n_tok) if p.random_ids == "text" else (v.lo, v.hi)
    if p.random_ids == "text" and n_tok < p.seq_len // 2:
        raise ValueError(f"text vocabulary ({n_tok}) is smaller than seq_len/2 = {p.seq_len // 2}")
    return Data(c.train, v, lo, hi, c.val, tuple(c.files), c.tokenizer)


def p_repeated_at(p: InductionPreset, step: int) -> float:
    """The curriculum: text only for the first ``text_steps`` steps, then ``p_repeated`` repeat rows."""
    return 0.0 if step < p.text_steps else p.p_repeated


def text_epochs(p: InductionPreset, n_text_tokens: int) -> float:
    """Expected passes over the training text: text rows x seq_len / corpus tokens."""
    rows = p.text_steps * p.batch_size + (p.steps - p.text_steps) * p.batch_size * (1 - p.p_repeated)
    return rows * p.seq_len / max(1, n_text_tokens)


def model_config(p: InductionPreset, vocab: RepeatedVocab, n_layers: int,
                 objective: StudyObjective) -> TransformerConfig:
    """Same shape for both objectives; only the attention mask differs (bidirectional for a masked model)."""
    return TransformerConfig(vocab_size=vocab.model_vocab, d_model=p.d_model, n_layers=n_layers, n_heads=p.n_heads,
                             d_mlp=0, attn_mask="bidirectional" if objective.masked else "causal",
                             max_seq_len=p.seq_len, positions=p.positions)


def batch_fn(p: InductionPreset, data: Data) -> Callable[[int, torch.Generator], torch.Tensor]:
    """``batches(step, gen) -> [batch_size, seq_len]``: the curriculum's rows at ``step`` (:func:`p_repeated_at`)."""

    def batches(step: int, gen: torch.Generator) -> torch.Tensor:
        return mixed_batch(data.text_ids, p.batch_size, p.seq_len, p_repeated_at(p, step), data.lo, data.hi, gen,
                           p.min_half)

    return batches


def train_config(p: InductionPreset, progress: bool) -> TrainConfig:
    return TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr, warmup_steps=min(p.warmup_steps, p.steps),
                       weight_decay=p.weight_decay, schedule=p.schedule, seed=p.seed, log_every=max(1, p.steps // 50),
                       ckpt_every=p.ckpt_every, keep_checkpoints=0, progress=progress)


def objective_of(p: InductionPreset, vocab: RepeatedVocab, objective: str) -> CardObjective:
    """The training objective of the label ``objective`` (one of :data:`OBJECTIVES`, see :data:`BUILDERS`)."""
    if objective not in BUILDERS:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return BUILDERS[objective](p, vocab)


def study_objective(p: InductionPreset, vocab: RepeatedVocab, objective: str | StudyObjective) -> StudyObjective:
    """The :class:`StudyObjective` of a label (built by :func:`objective_of`); one given is returned as it is."""
    if isinstance(objective, StudyObjective):
        return objective
    return StudyObjective(objective, objective_of(p, vocab, objective))


def train_model(p: InductionPreset, data: Data, n_layers: int, objective: str | StudyObjective, out: Path | None,
                progress: bool = True) -> tuple[Transformer, list[dict]]:
    """Train one model (AR: next-token loss, causal; DLM: MDLM loss, bidirectional) -> (model, metric rows).

    With ``out`` the run folder loads with :func:`dlmlab.load` (and the DLM with ``dlmlab sample``): its
    ``model.json`` records the objective as it writes itself (``ar``; ``mdlm`` with the mask id, the noise
    schedule and the mask-rate range ``[t_min, t_max]`` the DLM was trained on), beside the text tokenizer."""
    so = study_objective(p, data.vocab, objective)
    torch.manual_seed(p.seed)
    dev = p.torch_device()
    model = Transformer(model_config(p, data.vocab, n_layers, so)).to(dev)
    hist = train(model, train_config(p, progress), batch_fn(p, data), so.objective, out_dir=out, desc=f"{so.label} L{n_layers}",
                 tokenizer=data.tokenizer)
    return model, hist

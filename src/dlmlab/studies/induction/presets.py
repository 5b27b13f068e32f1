"""Typed presets of the induction study (smoke / cpu / paper)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from dlmlab.config import Config, require


@dataclass
class InductionPreset(Config):  # checked when built: options, finite numbers, validate()
    """Matched attention-only AR / masked-diffusion pairs at depths ``depths``.

    Curriculum (the same for the AR and the DLM of a pair): the first ``text_steps`` steps train on
    natural-text windows of ``text_source`` only (a corpus spec of :mod:`dlmlab.data.corpus`: a named
    offline corpus, a text / JSONL / Parquet file or folder, ``$ENV_VAR``, ``a+b``, ``a|fallback``);
    afterwards each row is, with probability ``p_repeated``, a random-token row with an embedded
    repeated segment (ids from the text vocabulary or a reserved range) and a text window otherwise.

    The DLM's mask rate is drawn t ~ U[t_min, t_max] (antithetic), weighted 1/t as in MDLM; the full
    range [0, 1] is the plain MDLM objective.  A narrower range keeps more context visible per
    training row, which is what lets induction emerge in the DLM within a CPU budget.  The mask-rate
    probe uses the same range, and its direction is patched from rate ``patch_high`` into ``patch_low``.
    """

    depths: list[int] = field(default_factory=lambda: [1, 2, 3])
    ar_min_depth: int = 1  # AR models are trained at the depths >= this only (cpu: 2; see docs "Budget")
    seeds: int = 2  # training seeds per model (seed, seed + 1, ...): intervals are over training seeds
    d_model: int = 64
    n_heads: int = 4
    seq_len: int = 64
    positions: Literal["learned", "rope"] = "learned"
    n_random: int = 128
    random_ids: Literal["reserved", "text"] = "reserved"  # draw repeated tokens from reserved ids or the text vocab
    min_half: int = 16  # training repeats: segment length uniform in [min_half, seq_len // 2], random start
    p_repeated: float = 0.75
    text_source: str = "tinyshakespeare"
    text_field: str = "text"  # JSONL field / Parquet column holding the documents
    max_chars: int = 0  # read at most this many characters of the corpus (0 = all)
    text_steps: int = 0  # curriculum: steps of text only before the repeat mix starts
    tokenizer: str = "char"
    bpe_vocab: int = 1024
    steps: int = 2000
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    weight_decay: float = 0.01
    ckpt_every: int = 100
    eval_seqs: int = 128  # repeated sequences for the accuracy evaluations
    few_ids: list[int] = field(default_factory=lambda: [4, 8, 16])  # the both-sides evaluation: repeats drawn
    # from this many distinct ids (one neighbour is then ambiguous, two mostly are not); the count is picked
    # on the AR's accuracy alone (claims.few_ids_choice) before the DLM is read
    per_seq: int = 8  # masked targets per sequence (DLM rows = eval_seqs * per_seq)
    probe_seqs: int = 256  # corrupted sequences for the mask-rate probe
    control_draws: int = 200  # random head sets / random shifts per control (>= 200 for a verdict; first steps: fewer)
    steer_prompts: int = 32  # prompts decoded while steering the mask-rate direction (0: steering not run)
    steer_threshold: float = 0.9  # the threshold decoder the steering claim decodes with (fixed in advance)
    background: float = 0.1  # global mask rate of the local-window test
    t_min: float = 0.001  # DLM training mask rates t ~ U[t_min, t_max]
    t_max: float = 1.0
    patch_low: float = 0.15  # mask-rate patching: low-corruption input ...
    patch_high: float = 0.8  # ... receives the probe-direction component of this high-corruption one
    seed: int = 0
    study_step_window: list[int] = field(default_factory=list)  # [lo, hi]: the study's "emerges around lo-hi
    # steps", judged only where the preset is the study's recipe (paper); empty: the step is reported, not judged
    device: str = "auto"  # "auto": cuda when available, else cpu
    threads: int = 1  # torch CPU threads during the study (restored after); 0 = leave as is.  Tiny models run
    # fastest single-threaded: extra threads only add synchronisation (and spin badly on a shared machine)

    def torch_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device

    def validate(self) -> None:
        require(self.control_draws >= 1, f"control_draws must be >= 1, got {self.control_draws}")
        require(self.seeds >= 1, f"seeds must be >= 1, got {self.seeds}")
        require(self.ar_min_depth >= 1, f"ar_min_depth must be >= 1, got {self.ar_min_depth}")
        require(all(k >= 2 for k in self.few_ids), f"few_ids must be >= 2 each, got {self.few_ids}")
        require(len(self.depths) > 0 and all(d >= 1 for d in self.depths), f"depths must be >= 1, got {self.depths}")
        require(self.seq_len % 2 == 0 and self.seq_len >= 12, f"seq_len must be even and >= 12, got {self.seq_len}")
        require(self.d_model % self.n_heads == 0, f"d_model {self.d_model} not divisible by n_heads {self.n_heads}")
        require(0.0 <= self.p_repeated <= 1.0, f"p_repeated must be in [0, 1], got {self.p_repeated}")
        require(1 <= self.min_half <= self.seq_len // 2, f"min_half must be in [1, seq_len/2], got {self.min_half}")
        require(self.n_random >= self.seq_len // 2, f"n_random ({self.n_random}) must be >= seq_len/2")
        require(self.steps > 0 and self.batch_size > 0, "steps and batch_size must be > 0")
        require(0 <= self.text_steps < self.steps, f"text_steps must be in [0, steps), got {self.text_steps}")
        require(self.max_chars >= 0, f"max_chars must be >= 0, got {self.max_chars}")
        require(bool(self.text_source), "text_source must name a corpus")
        require(self.ckpt_every >= 0, "ckpt_every must be >= 0")
        require(self.eval_seqs > 0 and self.per_seq > 0 and self.probe_seqs >= 8, "eval sizes must be positive")
        require(self.steer_prompts == 0 or self.probe_seqs >= self.steer_prompts + 8,
                f"steering needs probe_seqs >= steer_prompts + 8, got {self.probe_seqs} and {self.steer_prompts}")
        require(0.0 < self.steer_threshold < 1.0, f"steer_threshold must be in (0, 1), got {self.steer_threshold}")
        require(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
                f"device must be auto, cpu or cuda[:N], got {self.device!r}")
        require(self.threads >= 0, f"threads must be >= 0, got {self.threads}")
        require(0.0 <= self.background < 1.0, f"background must be in [0, 1), got {self.background}")
        require(0.0 < self.t_min < self.t_max <= 1.0, f"need 0 < t_min < t_max <= 1, got {self.t_min}, {self.t_max}")
        require(not self.study_step_window or (len(self.study_step_window) == 2
                                                and 0 <= self.study_step_window[0] < self.study_step_window[1]),
                f"study_step_window must be empty or [lo, hi] with 0 <= lo < hi, got {self.study_step_window}")
        require(0.0 < self.patch_low < self.patch_high <= 1.0,
                f"need 0 < patch_low < patch_high <= 1, got {self.patch_low}, {self.patch_high}")


STEPS_CPU = 16_000  # issue 34: both seeds of the AR and the DLM learn by then in the pilots ("Budget", docs/induction.md)

PRESETS: dict[str, InductionPreset] = {
    "smoke": InductionPreset(random_ids="text", depths=[1, 2], d_model=32, n_heads=2, seq_len=24, n_random=32,
                             min_half=6, steps=40, text_steps=20, warmup_steps=5, batch_size=16, ckpt_every=20,
                             eval_seqs=16, per_seq=4, probe_seqs=32, steer_prompts=4, few_ids=[3, 6]),
    # cpu (issue 34): the scale ladder's setting at d_model 64 -- 8 heads (previous- / next-token heads at 0.995 /
    # 0.992 over 2 seeds there), char Shakespeare, length 64, batch 32, constant lr 3e-3, DLM t in [0.02, 0.5] --
    # with 2 training seeds per model, the repeat mix from the first step (no text-only phase) and 16000 steps: in
    # single-model pilots of this recipe (docs/induction.md, "Budget") a text-only phase kept seed 0's AR from
    # forming induction for 16000 repeat steps, while from the first step both AR seeds learned by step 5000 and
    # both DLM seeds by step 13000.  To stay within the 20-minute budget on 2 cores the one-layer AR is not trained
    # (two_layers_needed is judged on the DLM, the summary's subject); checkpoints every 1000 steps (the emergence
    # claim needs a resolution <= 0.1 x 16000).
    "cpu": InductionPreset(depths=[1, 2], ar_min_depth=2, seeds=2, n_heads=8, seq_len=64, min_half=16,
                           positions="learned", random_ids="text", batch_size=32, steps=STEPS_CPU, text_steps=0,
                           p_repeated=0.75, schedule="constant", t_min=0.02, t_max=0.5, patch_low=0.05,
                           patch_high=0.5, ckpt_every=1000),
    # cpu_reserved_ids: the cpu recipe with the repeated rows drawn from n_random reserved ids (never seen in
    # text) instead of text ids: does the circuit change?  (docs/induction.md, "Reserved vs text ids").
    # Not a CLI choice: `python -c "from dlmlab.studies.induction import run; run('cpu_reserved_ids', 'DIR')"`.
    # paper: a local FineWeb-Edu sample ($DLMLAB_FINEWEB: a JSONL / Parquet file or folder), else the offline
    # WikiText-2 validation + test text + Tiny Shakespeare; BPE 8192.  Not run here (needs a GPU).
    "paper": InductionPreset(random_ids="text", d_model=512, n_heads=16, seq_len=512, n_random=4096, min_half=128,
                             tokenizer="bpe", bpe_vocab=8192, text_source="$DLMLAB_FINEWEB|wikitext2-valid+wikitext2-test+tinyshakespeare",
                             max_chars=200_000_000, steps=20000, text_steps=4000, batch_size=64, lr=1e-3,
                             warmup_steps=1000, schedule="cosine", threads=0, ckpt_every=1000, eval_seqs=512,
                             per_seq=16, probe_seqs=1024, study_step_window=[8000, 24000]),
}
PRESETS["cpu_reserved_ids"] = replace(PRESETS["cpu"], random_ids="reserved")


def first_steps(preset: InductionPreset, steps: int) -> InductionPreset:
    """``preset`` at its real model shapes for ``steps`` optimizer steps per model (the paper's first steps,
    issue 34): text-only steps, warm-up and checkpoints fit inside ``steps``; one seed; batch 2, one evaluation
    sequence with one target (each of the 2 x 16 per-head ablations of a layer reads it again: the largest cost),
    12 probe rows, 4 control draws (the controls then read underpowered), and no
    steering (200 threshold decodes of 512 tokens; its claim reads not_run), so every other analysis and every
    claim run on a CPU in minutes.  The claims of such a run say nothing about the study."""
    steps = max(1, int(steps))
    return replace(preset, steps=steps, text_steps=min(preset.text_steps, steps // 2), seeds=1,
                   warmup_steps=min(preset.warmup_steps, max(1, steps // 2)), ckpt_every=max(1, steps),
                   batch_size=min(preset.batch_size, 2), eval_seqs=min(preset.eval_seqs, 1), per_seq=1,
                   probe_seqs=min(preset.probe_seqs, 12), control_draws=min(preset.control_draws, 4),
                   steer_prompts=0, max_chars=min(preset.max_chars or 2_000_000, 2_000_000))

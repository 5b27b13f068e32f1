"""docs/config_reference.md, generated from the config dataclasses: every field, its type, default and meaning.

``python -m dlmlab.config_reference`` rewrites the page; ``--check`` exits 1 when the committed page differs
from what the dataclasses generate now (``tests/test_config_reference.py`` does the same check).

A field's meaning is taken from, in order: :data:`DOCS` below, a ``name: ...`` paragraph of its class's
docstring, the comment on its line in the class's source.  A field with none of them is an error, so a new
field cannot reach the page undocumented.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import sys
import tokenize
import typing
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config_reference.md"


def _sections() -> list[tuple[str, str, list[type]]]:
    """(title, how it is written, classes) of every section of the page."""
    from dlmlab.data.lm import DataConfig
    from dlmlab.models.config import TransformerConfig
    from dlmlab.models.mamba import MambaConfig
    from dlmlab.models.mamba2 import Mamba2Config
    from dlmlab.models.recurrent import RecurrentConfig
    from dlmlab.objectives.schedule import CosineSchedule, LinearSchedule, LogLinearSchedule
    from dlmlab.sampling.config import DecodeConfig
    from dlmlab.training.config import TrainConfig
    from dlmlab.training.run_config import RunConfig

    return [
        ("Run config (the YAML of `dlmlab train`)",
         "The top level of a run config: four sections (`model`, `train`, `data`, `objective`) and "
         "`eval_batches` (`noise` is the old spelling of `objective.noise`). An unknown field anywhere is a "
         "one-line error naming it.", [RunConfig]),
        ("`train:` the training loop", "`TrainConfig` (`dlmlab.training`).", [TrainConfig]),
        ("`data:` the text", "`DataConfig` (`dlmlab.data`).", [DataConfig]),
        ("`model:` family `transformer` (the default)",
         "`TransformerConfig` (`dlmlab.models`). `model.family` picks the section's class; `vocab_size` is "
         "set from the tokenizer (plus the ids the objective adds: one mask id for `objective: mdlm`).",
         [TransformerConfig]),
        ("`model:` family `mamba`", "`MambaConfig` (`dlmlab.models.mamba`).", [MambaConfig]),
        ("`model:` family `mamba2`", "`Mamba2Config` (`dlmlab.models.mamba2`).", [Mamba2Config]),
        ("`model:` family `lstm` or `gru`", "`RecurrentConfig` (`dlmlab.models.recurrent`); `cell` follows "
         "`model.family`.", [RecurrentConfig]),
        ("`objective:` the training objective",
         "The objective's card, as `model.json` records it (`dlmlab.objectives.card`): a bare name (`ar`, "
         "`mdlm`, or a name added with `dlmlab.objectives.register_objective`) or `{name: ..., ...fields}`. "
         "`ar` (`ARObjective`): `pad_id` (targets ignored), `per_row`, `float32`. `mdlm` "
         "(`MaskedDiffusionObjective`): `noise` (the schedule below, default linear), `t_range: [lo, hi]` "
         "(draw mask times uniformly there instead), `pad_id` (never masked); its mask id is set by the run "
         "(the id past the tokenizer's). An old top-level `noise:` section is read as `objective.noise`.", []),
        ("`objective.noise:` the masked-diffusion noise schedule",
         "`noise: {name: linear | loglinear | cosine, ...fields}` or a bare name "
         "(`dlmlab.objectives.schedule`); mdlm only.", [LinearSchedule, LogLinearSchedule, CosineSchedule]),
        ("Sampling: `DecodeConfig`",
         "`dlmlab.sampling.DecodeConfig`, the masked-diffusion decoder; most fields are also `dlmlab sample` "
         "options (`--block-len` for `block_len`).", [DecodeConfig]),
    ]


#: meanings of fields whose class states none (keys ``Class.field``)
DOCS: dict[str, str] = {
    # RunConfig
    "RunConfig.model": "the model: `family` (transformer, mamba, mamba2, lstm, gru) and that family's fields "
                       "(sections below)",
    "RunConfig.train": "the training loop (section `train:`)",
    "RunConfig.data": "the text and its tokenizer (section `data:`)",
    "RunConfig.objective": "the objective's card (section `objective:`): `ar` (next-token prediction), `mdlm` "
                           "(masked diffusion) or `{name: ..., ...fields}`; the old names `dlm` / `mdm` are "
                           "refused, naming `mdlm`",
    "RunConfig.eval_batches": "batches of held-out windows in each evaluation (perplexity, or the ELBO bound "
                              "for mdlm)",
    "RunConfig.noise": "old spelling of `objective.noise` (read into the objective; config.json writes it there)",
    # TrainConfig
    "TrainConfig.steps": "optimizer steps in total (`dlmlab train --steps M` overrides it and extends a run)",
    "TrainConfig.batch_size": "sequences per step, the global batch (each of N torchrun processes takes "
                              "batch_size / N)",
    "TrainConfig.lr": "peak learning rate of AdamW",
    "TrainConfig.weight_decay": "AdamW decoupled weight decay",
    "TrainConfig.beta1": "AdamW first-moment decay",
    "TrainConfig.beta2": "AdamW second-moment decay",
    "TrainConfig.warmup_steps": "linear warmup steps from 0 to `lr`",
    "TrainConfig.schedule": "learning-rate shape after warmup: constant, cosine or linear decay to "
                            "`min_lr_ratio * lr`",
    "TrainConfig.min_lr_ratio": "final learning rate as a share of `lr` (cosine / linear)",
    "TrainConfig.grad_clip": "clip the global gradient norm to this (0: no clipping)",
    "TrainConfig.seed": "seed of the model's initialisation and of the batches (results do not depend on the "
                        "machine or thread count)",
    "TrainConfig.log_every": "write a row to `metrics.jsonl` every this many steps",
    "TrainConfig.eval_every": "evaluate on held-out text every this many steps (0: only at the end)",
    "TrainConfig.ckpt_every": "write a checkpoint every this many steps (0: only at the end)",
    "TrainConfig.keep_checkpoints": "newest checkpoints kept (0: keep all); pruning prints one line",
    "TrainConfig.progress": "show a progress bar (`dlmlab train --no-progress` sets false; may differ on resume)",
    # DataConfig
    "DataConfig.source": "a named offline corpus (`tinyshakespeare`, `wikitext2-valid`, `wikitext2-test`, read "
                         "from `$DLMLAB_DATA` or `../shared/data`) or a path to a UTF-8 text file",
    "DataConfig.tokenizer": "`char` (one id per character) or `bpe` (byte-level BPE fitted on the training text)",
    "DataConfig.bpe_vocab": "vocabulary size of the `bpe` tokenizer",
    "DataConfig.seq_len": "tokens per training window (the model must have at least this many positions)",
    "DataConfig.val_fraction": "the last share of the text, held out for evaluation",
    # TransformerConfig
    "TransformerConfig.vocab_size": "input vocabulary (0: set from the tokenizer, plus the mask id for mdlm)",
    "TransformerConfig.n_out": "output size (0: `vocab_size`, a language model; else a tagger's classes)",
    "TransformerConfig.d_model": "residual stream width D",
    "TransformerConfig.n_layers": "blocks",
    "TransformerConfig.n_heads": "attention heads per block",
    "TransformerConfig.d_head": "width per head (0: d_model // n_heads)",
    "TransformerConfig.d_mlp": "MLP hidden width (0: attention-only blocks)",
    "TransformerConfig.mlp": "MLP kind: gelu, gelu_new (tanh approximation, GPT-2), relu, swiglu (Llama)",
    "TransformerConfig.norm": "layernorm, rmsnorm or none (pre-norm blocks and a final norm)",
    "TransformerConfig.norm_eps": "epsilon of the norms",
    "TransformerConfig.attn_mask": "default attention mask: causal (AR), bidirectional (mdlm), hybrid "
                                   "(prompt bidirectional, the rest causal; needs prompt_len)",
    "TransformerConfig.positions": "learned position embeddings, rope, alibi or none",
    "TransformerConfig.rope_theta": "RoPE base frequency",
    "TransformerConfig.max_seq_len": "positions of learned embeddings (and the longest sequence they allow)",
    "TransformerConfig.bias": "biases on every linear map and norm",
    "TransformerConfig.qkv_bias": "biases on the query / key / value maps even when `bias` is false (Qwen2)",
    "TransformerConfig.tie_embeddings": "the unembedding shares the token embedding's weights "
                                        "(when n_out == vocab_size)",
    "TransformerConfig.init_std": "standard deviation of the normal initialisation of weights and embeddings",
    # MambaConfig
    "MambaConfig.vocab_size": "input vocabulary (0: set from the tokenizer)",
    "MambaConfig.d_model": "residual stream width D",
    "MambaConfig.n_layers": "Mamba blocks",
    "MambaConfig.d_state": "SSM state size N per channel",
    "MambaConfig.expand": "inner width as a multiple of d_model (d_inner = expand * d_model)",
    "MambaConfig.d_inner": "inner (SSM) width (0: int(expand * d_model))",
    "MambaConfig.d_conv": "kernel width of the causal depthwise convolution",
    "MambaConfig.dt_rank": "rank of the step-size projection (0: ceil(d_model / 16), HF's auto)",
    "MambaConfig.conv_bias": "bias on the causal convolution",
    "MambaConfig.norm_eps": "epsilon of the RMS norms",
    "MambaConfig.dt_min": "smallest initial step size (dt drawn log-uniformly in [dt_min, dt_max])",
    "MambaConfig.dt_max": "largest initial step size",
    "MambaConfig.dt_init_floor": "floor of the initial step size",
    "MambaConfig.dt_scale": "scale of the step-size projection's initialisation",
    "MambaConfig.scan_chunk": "chunk length of the chunked scan (and checkpoint interval of the fused one)",
    "MambaConfig.n_out": "output size (0: `vocab_size`, a language model; else a tagger's classes)",
    "MambaConfig.tie_embeddings": "the unembedding shares the token embedding's weights (when n_out == vocab_size)",
    "MambaConfig.scan": "selective-scan implementation: fused (C++ kernel), chunked or sequential (PyTorch); "
                        "same result, see docs/models.md",
    "MambaConfig.init_std": "standard deviation of the embedding initialisation",
    # Mamba2Config
    "Mamba2Config.n_out": "output size (0: `vocab_size`, a language model; else a tagger's classes)",
    "Mamba2Config.tie_embeddings": "the unembedding shares the token embedding's weights (when n_out == vocab_size)",
    "Mamba2Config.scan": "SSD implementation: fused (C++ kernel, ssd_fused), chunked or sequential (ssd.py); "
                         "same result",
    "Mamba2Config.vocab_size": "input vocabulary (0: set from the tokenizer)",
    "Mamba2Config.d_model": "residual stream width D",
    "Mamba2Config.n_layers": "Mamba-2 blocks",
    "Mamba2Config.d_state": "SSM state size N per head",
    "Mamba2Config.expand": "inner width as a multiple of d_model",
    "Mamba2Config.d_inner": "inner width (0: int(expand * d_model)); heads = d_inner / headdim",
    "Mamba2Config.headdim": "channels per SSD head",
    "Mamba2Config.d_conv": "kernel width of the causal depthwise convolution",
    "Mamba2Config.use_conv": "false removes the causal convolution",
    "Mamba2Config.conv_bias": "bias on the causal convolution",
    "Mamba2Config.bias": "in_proj / out_proj bias",
    "Mamba2Config.norm_eps": "epsilon of the RMS norms (and the gated norm)",
    "Mamba2Config.dt_min": "smallest initial step size",
    "Mamba2Config.dt_max": "largest initial step size",
    "Mamba2Config.dt_init_floor": "floor of the initial step size",
    "Mamba2Config.init_std": "standard deviation of the embedding initialisation",
    # RecurrentConfig
    "RecurrentConfig.cell": "lstm or gru (follows `model.family` in a run config)",
    "RecurrentConfig.vocab_size": "input vocabulary (0: set from the tokenizer)",
    "RecurrentConfig.n_layers": "recurrent layers",
    "RecurrentConfig.n_out": "output size (0: `vocab_size`, a language model; else a tagger's classes)",
    "RecurrentConfig.residual": "add each layer's input to its output (needs d_model == hidden_size); "
                                "false: a plain stack",
    "RecurrentConfig.final_norm": "norm before the unembedding: layernorm, rmsnorm or none",
    "RecurrentConfig.norm_eps": "epsilon of the final norm",
    "RecurrentConfig.tie_embeddings": "the unembedding shares the embedding's weights (needs equal widths)",
    # noise schedules
    "LinearSchedule.eps": "training times t are drawn from [eps, 1]; alpha(t) = 1 - t",
    "LogLinearSchedule.eps": "share of tokens left clean at t = 1: alpha(t) = 1 - (1 - eps) t",
    "LogLinearSchedule.t_lo": "training times are drawn from [t_lo, 1] (the weight diverges at t = 0)",
    "CosineSchedule.eps": "alpha(t) = eps + (1 - eps) cos(pi t / 2)",
    "CosineSchedule.t_lo": "training times are drawn from [t_lo, 1]",
    # DecodeConfig (the rest are in its docstring)
    "DecodeConfig.temperature": "sampling temperature of the committed tokens (0: greedy)",
    "DecodeConfig.top_p": "nucleus sampling: keep the smallest set of tokens with this much probability",
    "DecodeConfig.self_cond": "feed the previous step's prediction back (models trained with self-conditioning)",
}

# types shown in words where the annotation says less than the YAML takes
TYPES = {"RunConfig.model": "mapping", "RunConfig.train": "mapping", "RunConfig.data": "mapping",
         "RunConfig.noise": "name or mapping", "RunConfig.objective": "name or mapping",
         "DecodeConfig.noise": "NoiseSchedule, name or mapping"}


def _docstring_fields(cls: type) -> dict[str, str]:
    """``name: text`` paragraphs of the class docstring (continuation lines indented deeper)."""
    doc = inspect.getdoc(cls) or ""
    out: dict[str, str] = {}
    current = None
    for line in doc.splitlines():
        m = re.match(r"^(\w+): (.+)$", line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.startswith(" ") and line.strip():
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def _comments(cls: type) -> dict[str, str]:
    """The comment on each field's line in the source of ``cls`` and its dataclass bases."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            src = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        lines = src.splitlines()
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type != tokenize.COMMENT:
                continue
            m = re.match(r"^\s{4}(\w+)\s*:", lines[tok.start[0] - 1])
            if m:
                out[m.group(1)] = tok.string.lstrip("#").strip()
    return out


def _type(cls: type, f: dataclasses.Field) -> str:
    key = f"{cls.__name__}.{f.name}"
    if key in TYPES:
        return TYPES[key]
    try:
        hint = typing.get_type_hints(cls)[f.name]
    except Exception:  # noqa: BLE001 - an unresolvable annotation is shown as written
        return f"`{f.type}`"
    return _fmt_type(hint)


def _fmt_type(hint) -> str:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(hint))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_fmt_type(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "`None`"
    return f"`{getattr(hint, '__name__', str(hint))}`"


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        name = getattr(value, "name", None)
        fields = dataclasses.fields(value)
        if isinstance(name, str) and all(x.default is not dataclasses.MISSING for x in fields):
            return f"`{name}`"
        return "(section)"
    return f"`{value!r}`"


def _markdown(text: str) -> str:
    """Docstring markup as Markdown: ````x```` -> `x`, ``:mod:`~a.b``` -> `b`, ``:class:`a.B``` -> `a.B`."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: "`" + m.group(1).split(".")[-1] + "`"
                  if m.group(0).split("`")[1].startswith("~") else "`" + m.group(1) + "`", text)
    return text.replace("``", "`").replace("|", "\\|")


def field_rows(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, meaning) of every field of ``cls``; raises naming an undocumented field."""
    from_doc, comments = _docstring_fields(cls), _comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{cls.__name__}.{f.name}"
        meaning = DOCS.get(key) or from_doc.get(f.name) or comments.get(f.name)
        if not meaning:
            raise ValueError(f"{key} has no documentation: add it to dlmlab.config_reference.DOCS, to the class "
                             "docstring (`name: ...`) or as a comment on its line")
        rows.append((f.name, _type(cls, f), _default(f), _markdown(meaning)))
    return rows


def render() -> str:
    """The page's Markdown."""
    parts = ["# Config reference", "",
             "Every field of every config dataclass, its type, default and what it does. Generated from the "
             "dataclasses by `python -m dlmlab.config_reference` (`tests/test_config_reference.py` fails when "
             "this page and the code differ), so do not edit it by hand. Every config is checked when built: "
             "a value outside its options or range is a one-line error naming the field. YAML examples: "
             "[configs/](../configs/); the tutorial: [tutorial.md](tutorial.md).", ""]
    for title, intro, classes in _sections():
        parts += [f"## {title}", "", intro, ""]
        for cls in classes:
            if len(classes) > 1:
                parts += [f"### `{getattr(cls, 'name', cls.__name__)}` ({cls.__name__})", ""]
            parts += ["| field | type | default | what it does |", "|---|---|---|---|"]
            parts += [f"| `{n}` | {t} | {d} | {m} |" for n, t, d, m in field_rows(cls)]
            parts.append("")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run python -m dlmlab.config_reference", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

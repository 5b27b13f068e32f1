"""``dlmlab.load(path)``: one call loads a trained run, one of its checkpoints, or a Hugging Face folder.

Accepted folders:

* a run folder written by ``dlmlab train``, :func:`dlmlab.training.lm.run_training` or
  :func:`dlmlab.training.train` (``model.json`` + ``checkpoints/``): its latest checkpoint, or
  checkpoint ``N`` with ``load(run, step=N)``;
* one of its checkpoint folders, ``RUN/checkpoints/step_N`` (that checkpoint);
* a local Hugging Face model folder (``config.json`` with ``model_type`` + weights): GPT-2, Llama,
  Mistral, Qwen2, GPT-NeoX, Mamba, Mamba-2, LLaDA, Dream (:func:`dlmlab.models.hf_auto.load_hf`).

Example::

    run = dlmlab.load("runs/mdlm")
    logits = run.model(tokens)                        # tokens [B, T] -> logits [B, T, V]
    if run.objective.denoises:                        # e.g. a MaskedDiffusionObjective
        tokens[:, -4:] = run.mask_id                  # what the model was trained to fill in
        nelbo = elbo_bound(run.model, tokens, run.mask_id, schedule=run.noise)  # dlmlab.objectives
        batch = run.objective.make_batch(tokens, gen)  # or go on training with the objective it was trained with

Runs written before runs saved ``model.json`` are not loaded (train them again): the card is what says
what a folder's model is.  A card that names no objective takes it from the run's ``config.json`` when
there is one (its ``objective`` section; the mask token is then the id past the tokenizer's), and a card's
objective fields it lacks (a card written before cards recorded the noise schedule) come from there too.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlmlab.data.tokenizer import load_tokenizer
from dlmlab.errors import UserError
from dlmlab.objectives.card import OLD_OBJECTIVE_NAMES, objective_class, objective_from_section
from dlmlab.rundir.card import CARD_NAME, TOKENIZER_NAME, build_from_card, card_objective, check_card, read_card
from dlmlab.rundir.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint

ACCEPTED = ("give a run folder written by `dlmlab train` or train() (model.json and checkpoints/), one of its "
            "checkpoints/step_N folders, or a Hugging Face model folder (config.json and weights)")
# files that hold a Hugging Face tokenizer
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


@dataclass(frozen=True)
class Loaded:
    """What :func:`load` returns.

    model: the model in eval mode (a dlmlab :class:`~dlmlab.interp.hooks.HookedModule`: hook points, ``cache``...),
    with the tokenizer attached as ``model.tokenizer`` (so ``model.to_tokens(text)`` works, as in TransformerLens);
    tokenizer: the run's tokenizer (``encode`` / ``decode``; a ``transformers`` tokenizer for a Hugging Face
    folder), or ``None`` when the folder has none;
    objective: the :class:`~dlmlab.objectives.objective.Objective` the model was trained with, every field
    included (``ARObjective``, ``MaskedDiffusionObjective`` with its mask id, noise schedule, ``t_range`` and
    ``pad_id``, ...), read from ``model.json``; LLaDA / Dream: masked diffusion under the default linear schedule
    (masks drawn at ``t ~ U[0, 1]``); ``None`` for a run whose card names no objective.  An objective equals its
    name, so ``run.objective == "mdlm"`` holds for a masked-diffusion model;
    shift_logits: True when the logits at position ``i - 1`` predict token ``i``: every AR model (next-token
    logits) and Dream (a masked-diffusion model whose output is shifted the same way); False when the
    logits at ``i`` predict token ``i`` itself (dlmlab's mdlm, LLaDA).  Not the same as
    :attr:`dlmlab.models.hf_auto.HFInfo.shift_logits`, which marks Dream's shifted diffusion output only;
    bidirectional: every position sees the whole sequence by default;
    family: ``transformer``, ``mamba``, ``mamba2``, ``lstm``, ``gru`` (or the HF loader's family);
    source: the folder given; format: ``"run"``, ``"checkpoint"``, or the Hugging Face model type;
    step: the training step of the loaded checkpoint (``None`` for Hugging Face folders).

    Read off the objective: ``mask_id`` (the mask token; ``None`` for AR), ``noise`` (the noise schedule of a
    masked-diffusion model, else ``None``), ``t_range`` (``(lo, hi)`` when training drew the mask times
    uniformly on that range, else ``None``), ``pad_id``.
    """

    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    objective: Any
    shift_logits: bool
    family: str
    source: Path
    format: str
    bidirectional: bool = False
    step: int | None = None

    @property
    def objective_name(self) -> str | None:
        """The objective's name (``"ar"``, ``"mdlm"``, ...), ``None`` when the run names none."""
        return getattr(self.objective, "name", None)

    @property
    def mask_id(self) -> int | None:
        return getattr(self.objective, "mask_id", None)

    @property
    def noise(self):
        """The noise schedule of a denoising objective (masked diffusion: its ``schedule``), else ``None``."""
        return getattr(self.objective, "schedule", None) if getattr(self.objective, "denoises", False) else None

    @property
    def t_range(self) -> tuple[float, float] | None:
        return getattr(self.objective, "t_range", None)

    @property
    def pad_id(self) -> int | None:
        return getattr(self.objective, "pad_id", None)


def _is_checkpoint(p: Path) -> bool:
    return (p / "model.safetensors").is_file() and (p / "state.json").is_file()


def run_of(path: Path) -> Path:
    """The run folder of a run folder or of one of its ``checkpoints/`` folders."""
    path = Path(path)
    return path.parent.parent if path.parent.name == "checkpoints" else path


_run_of = run_of


def is_training_run(path: Path) -> bool:
    """A dlmlab training run (``dlmlab train``, or ``train(out_dir=...)``) or one of its checkpoint folders:
    checkpoints, a model card or a run config, and no Hugging Face ``config.json``."""
    run = _run_of(path)
    return has_run_config(path) or (_hf_config(run) is None and (
        (run / "checkpoints").is_dir() or (run / "model.json").is_file() or _is_checkpoint(path)))


def has_run_config(path: Path) -> bool:
    """A ``dlmlab train`` run (or one of its checkpoints): its ``config.json`` is a run config, not a Hugging Face
    one (a damaged run config counts, so that its error names the file and line)."""
    run = _run_of(path)
    return (run / "config.json").is_file() and _hf_config(run) is None


def _hf_config(p: Path) -> dict | None:
    """``config.json`` of a Hugging Face folder (it names a ``model_type`` or ``architectures``), else None."""
    cfg = p / "config.json"
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and ("model_type" in data or "architectures" in data) else None


def _config_objective(run: Path | None) -> tuple[dict | None, str]:
    """The ``objective`` section of a ``dlmlab train`` run's ``config.json`` as a card (``{"objective": name,
    **fields}``; a config written before that section was the card: its name and its ``noise`` section), and
    the file's path; ``(None, path)`` when there is none."""
    path = run / "config.json" if run is not None else None
    if path is None or not path.is_file() or _hf_config(run) is not None:
        return None, str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, str(path)  # not a run config; the card says everything else
    section = data.get("objective") if isinstance(data, dict) else None
    if isinstance(section, str):
        section = {"name": section, **({"noise": data["noise"]} if data.get("noise") is not None else {})}
    if not isinstance(section, dict) or not isinstance(section.get("name"), str):
        return None, str(path)
    card = {k: v for k, v in section.items() if k != "name"}
    return {"objective": section["name"], **card}, str(path)


def _card_with_config(card: dict, run: Path | None, where: str) -> tuple[dict, str]:
    """``card`` completed from the run's ``config.json``: the objective when the card names none, the
    objective's fields the card lacks (when both name the same objective)."""
    section, cfg_where = _config_objective(run)
    if section is None:
        return card, where
    if card.get("objective") is None:
        name = section["objective"]
        cls = objective_class(name, f"{cfg_where}: objective.name")
        vocab = card["config"]["vocab_size"] - cls.added_ids  # the tokenizer's ids: the run adds the rest
        fields = {k: v for k, v in section.items() if k != "objective"}
        objective = objective_from_section({"name": name, **fields}, f"{cfg_where}: objective").for_vocab(vocab)
        card = {**card, **objective.to_card()}
        card["shift_logits"] = bool(objective.shift_logits)
        check_card(card, f"{where} (objective from {cfg_where})")
        return card, f"{cfg_where}: objective"
    missing = {k: v for k, v in section.items() if k not in card}
    if section["objective"] == card["objective"] and missing:
        return {**card, **missing}, f"{where} (with {', '.join(sorted(missing))} from {cfg_where})"
    return card, where


def _from_card(card: dict, where: str, ck: Path, tok_dirs: list[Path], source: Path, fmt: str, dtype, device,
               run: Path | None = None) -> Loaded:
    card, where = _card_with_config(card, run, where)
    objective = card_objective(card, where)
    model = build_from_card(card)
    state = load_checkpoint(ck, model)
    tok_file = next((d / TOKENIZER_NAME for d in tok_dirs if (d / TOKENIZER_NAME).is_file()), None)
    tokenizer = load_tokenizer(tok_file) if tok_file is not None else None
    return Loaded(model=_place(model, dtype, device, tokenizer, objective), tokenizer=tokenizer, objective=objective,
                  shift_logits=bool(card.get("shift_logits", True)), family=card["family"], source=source,
                  format=fmt, bidirectional=bool(card.get("bidirectional")),
                  step=int(state["step"]) if "step" in state else None)


def _read_card(folders: list[Path]) -> tuple[dict | None, str]:
    """The first card in ``folders`` (a checkpoint's own, then its run's) and its path."""
    for d in folders:
        card = read_card(d)
        if card is not None:
            return card, str(d / CARD_NAME)
    return None, CARD_NAME


def _place(model, dtype, device, tokenizer=None, objective=None):
    """The model on ``device`` / ``dtype``, in eval mode, with ``tokenizer`` attached (``model.tokenizer``:
    TransformerLens's ``to_tokens`` / ``to_str_tokens`` / ``to_string`` use it) and ``objective`` too
    (``model.objective``: ``return_type="loss"`` gives that objective's loss, :mod:`dlmlab.interp.loss`)."""
    if dtype is not None or device is not None:
        model = model.to(device=device, dtype=dtype)
    if tokenizer is not None:
        model.tokenizer = tokenizer
    if objective is not None:
        model.objective = objective
    return model.eval()


def _hf_tokenizer(path: Path | None):
    if path is None or not any((path / f).is_file() for f in HF_TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load the tokenizer in {path}: {' '.join(str(e).split())[:300]}") from None


def _from_hf(p: Path, dtype, device) -> Loaded:
    try:
        from dlmlab.models.hf_auto import load_hf
    except ModuleNotFoundError as e:
        if e.name != "dlmlab.models.hf_auto":
            raise
        raise UserError(f"{p} is a Hugging Face folder, and this dlmlab build cannot load those "
                        "(dlmlab.models.hf_auto is missing)") from None
    import torch

    model, info = load_hf(p, dtype or torch.float32)
    tok_dir = Path(info.tokenizer_path) if info.tokenizer_path else p
    objective = _hf_objective(info)
    # HFInfo.shift_logits marks Dream's shifted diffusion output only; Loaded.shift_logits also holds for
    # every AR model, whose logits at i - 1 predict token i as well
    shift = bool(info.shift_logits) or bool(getattr(objective, "shift_logits", False))
    tokenizer = _hf_tokenizer(tok_dir)
    return Loaded(model=_place(model, None, device, tokenizer, objective), tokenizer=tokenizer, objective=objective,
                  shift_logits=shift, family=info.family, source=p, format=info.format,
                  bidirectional=bool(info.bidirectional))


def _hf_objective(info):
    """A Hugging Face model's objective, by the name its loader gives (``"ar"``; LLaDA, Dream: masked diffusion
    under the default linear schedule, with the model's mask id); ``None`` when it names none."""
    name = OLD_OBJECTIVE_NAMES.get(info.objective, info.objective)
    if name is None:
        return None
    return objective_class(name, "the Hugging Face loader's objective").from_card(
        {"objective": name, "mask_id": info.mask_id}, "the Hugging Face folder")


def step_checkpoint(p: Path, step: int) -> Path:
    """Checkpoint ``step`` of run folder ``p`` (a one-line error naming the steps it has, if not there)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UserError(f"step must be a checkpoint's step number (an int >= 0), got {step!r}")
    cks = list_checkpoints(p)
    for s, ck in cks:
        if s == step:
            return ck
    have = ", ".join(str(s) for s, _ in cks) or "none"
    raise UserError(f"{p} has no checkpoint of step {step} (it keeps steps: {have}; train.keep_checkpoints "
                    "sets how many are kept, 0 = all)")


def load(path: str | Path, dtype=None, device=None, step: int | None = None) -> Loaded:
    """Load a run folder, a checkpoint folder or a Hugging Face folder (see the module docstring).

    ``dtype`` / ``device``: where to put the model (default: as saved, float32 on the CPU).
    ``step``: with a run folder, load its checkpoint of that training step instead of the latest one
    (``Loaded.step`` says which was loaded); a step the run does not keep is a one-line error listing
    the steps it has.  A path that is none of these is a one-line :class:`~dlmlab.errors.UserError`
    saying what is accepted.  ``"zoo:NAME"`` loads a model of the zoo the package ships (:mod:`dlmlab.zoo`).
    """
    from dlmlab.rundir.zoo import is_zoo, resolve

    p = resolve(path) if is_zoo(path) else Path(path)
    if not p.exists():
        raise UserError(f"{p} does not exist; {ACCEPTED}")
    if not p.is_dir():
        raise UserError(f"{p} is a file, not a folder; {ACCEPTED}")
    if step is not None:
        if _is_checkpoint(p):
            raise UserError(f"{p} is a checkpoint folder; step= picks a checkpoint of a run folder (give the run)")
        if (p / "checkpoints").is_dir() or (p / "model.json").is_file():
            p = step_checkpoint(p, step)
        else:
            raise UserError(f"{p} is not a dlmlab run folder (no checkpoints/), so it has no step {step} to load")
        loaded = load(p, dtype, device)
        return dataclasses.replace(loaded, step=step if loaded.step is None else loaded.step)
    if _is_checkpoint(p):
        run = p.parent.parent if p.parent.name == "checkpoints" else None
        card, where = _read_card([p] + ([run] if run is not None else []))
        if card is not None:
            return _from_card(card, where, p, [p] + ([run] if run else []), p, "checkpoint", dtype, device, run)
        raise UserError(f"{p} is a checkpoint folder without model.json (nor has its run folder one), so its model "
                        "is unknown (runs written before runs saved model.json are not loaded: train it again); "
                        "or pass the model you build to dlmlab.rundir.load_checkpoint")
    is_run = (p / "checkpoints").is_dir() or (p / "model.json").is_file()
    if is_run:
        ck = latest_checkpoint(p)
        if ck is None:
            raise UserError(f"{p} is a run folder with no complete checkpoint yet (checkpoints/ is empty); "
                            "train it (longer) first")
        card, where = _read_card([ck, p])
        if card is not None:
            return _from_card(card, where, ck, [ck, p], p, "run", dtype, device, p)
        raise UserError(f"{p} is a run folder without model.json (trained before runs saved their model config), "
                        "so its model is unknown; train it again or load its checkpoint into a model you build")
    if _hf_config(p) is not None:
        return _from_hf(p, dtype, device)
    raise UserError(f"{p} is not a folder dlmlab can load; {ACCEPTED}")


__all__ = ["Loaded", "load", "step_checkpoint", "is_training_run", "has_run_config", "run_of"]

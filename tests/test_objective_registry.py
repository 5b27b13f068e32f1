"""The objective registry (issue 35): a user's objective registered with `register_objective` trains, saves,
loads and evaluates with no change to dlmlab; the objective decides the ids it adds, the window and the
evaluation; the run config's objective section is the objective's card."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import dlmlab
from dlmlab.cli.main import main
from dlmlab.config import ConfigError
from dlmlab.data import TokenStream, train_tokenizer
from dlmlab.errors import UserError
from dlmlab.objectives import (ARObjective, CardObjective, MaskedDiffusionObjective, ar_loss, objective_from_card,
                               objective_from_section, objective_section, register_objective)
from dlmlab.training import TrainConfig, train
from dlmlab.training.lm import evaluate_lm
from dlmlab.training.run_config import RunConfig, build_run_model, run_objective

TEXT = "the cat sat on the mat. the dog ran to it. " * 30


@dataclass(eq=False)
class ScaledAR(CardObjective):
    """A user's objective: next-token loss times ``scale`` (written in a user's file, as the docs show)."""

    scale: float = 1.0

    name: ClassVar[str] = "scaled_ar"
    shift_logits: ClassVar[bool] = True

    def make_batch(self, tokens, gen=None, step=0, **extra):
        return {"tokens": tokens, **extra}

    def loss(self, model, batch):
        loss, metrics = ar_loss(model, batch["tokens"])
        return self.scale * loss, {"loss": (self.scale * loss).detach()}

    def to_card(self):
        return {"objective": self.name, "scale": self.scale}

    @classmethod
    def from_card(cls, card, where="model.json"):
        return cls(scale=float(card.get("scale", 1.0)))


register_objective("scaled_ar", ScaledAR)


def test_a_registered_objective_trains_saves_loads_and_evaluates(tmp_path, capsys):
    from conftest import tiny_transformer

    tok = train_tokenizer("char", TEXT)
    ids = torch.tensor(tok.encode(TEXT))
    obj = ScaledAR(scale=0.5)

    def batches(step, gen):
        return TokenStream.windows(ids, 4, obj.window(8), gen)

    model = tiny_transformer(vocab_size=tok.vocab_size)
    train(model, TrainConfig(steps=2, batch_size=4, progress=False), batches, obj, out_dir=tmp_path / "run",
          tokenizer=tok)
    card = json.loads((tmp_path / "run" / "model.json").read_text())
    assert (card["objective"], card["scale"], card["shift_logits"]) == ("scaled_ar", 0.5, True)
    run = dlmlab.load(tmp_path / "run")
    assert run.objective == ScaledAR(scale=0.5) and run.objective != ScaledAR(scale=1.0)
    assert run.shift_logits and run.mask_id is None
    # evaluated as the objective says: its window (T + 1), its loss, an exact NLL (not a bound)
    stream = TokenStream(ids, 0.5)
    want = 0.5 * ar_loss(run.model, stream.val[: 2 * 9].view(2, 9))[0].item()
    assert evaluate_lm(run.model, run.objective, stream, 8, 2, 1) == pytest.approx(
        {"nll": want, "ppl": math.exp(want)}, rel=1e-6)
    (tmp_path / "c.txt").write_text(TEXT)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--source", str(tmp_path / "c.txt"), "--seq-len", "8",
                 "--batches", "1", "--batch-size", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    from dlmlab.data import DataConfig, load_corpus

    held_out, _ = load_corpus(DataConfig(source=str(tmp_path / "c.txt"), seq_len=8), tok)
    want = evaluate_lm(run.model, run.objective, held_out, 8, 2, 1)
    assert {k: printed[k] for k in ("nll", "ppl")} == want and printed["format"] == "run"


def test_register_objective_refuses_a_taken_name_or_an_incomplete_class():
    with pytest.raises(UserError, match="'ar' is taken"):
        register_objective("ar", type("X", (ScaledAR,), {"name": "ar"}))
    with pytest.raises(UserError, match="the class's name attribute is 'scaled_ar'"):
        register_objective("other", ScaledAR)
    with pytest.raises(UserError, match="lacks .*from_card"):
        register_objective("half", type("Half", (), {"name": "half", "loss": lambda s: 0}))
    register_objective("scaled_ar", ScaledAR)  # the same class again: nothing changes


def test_the_objective_decides_ids_window_and_evaluation():
    ar, md = ARObjective(), MaskedDiffusionObjective(schedule="loglinear")
    assert (ar.added_ids, ar.window(12), ar.denoises) == (0, 13, False)
    assert (md.added_ids, md.window(12), md.denoises, md.mask_id) == (1, 12, True, None)
    assert md.for_vocab(65).mask_id == 65 and ar.for_vocab(65) is ar
    assert MaskedDiffusionObjective(7).for_vocab(65).mask_id == 7  # an assigned mask id is kept
    assert ar.eval_metrics(0.0) == {"nll": 0.0, "ppl": 1.0} and md.eval_metrics(0.0) == {"nelbo": 0.0,
                                                                                           "ppl_bound": 1.0}
    cfg = RunConfig(objective={"name": "mdlm", "t_range": [0.1, 0.5]},
                    model={"family": "gru", "d_model": 8, "n_layers": 1})
    assert run_objective(cfg, 40) == MaskedDiffusionObjective(40, None, (0.1, 0.5))
    assert build_run_model(cfg, 40).cfg.vocab_size == 41
    with pytest.raises(UserError, match="no mask_id yet"):
        md.loss(None, {})


def test_the_objective_section_is_the_card_without_added_ids():
    md = objective_from_section({"name": "mdlm", "noise": "cosine", "pad_id": 3})
    section = objective_section(md)
    assert section == {"name": "mdlm", "noise": {"name": "cosine", "eps": 0.001, "t_lo": 0.001}, "t_range": None,
                       "pad_id": 3}
    card = md.for_vocab(9).to_card()
    assert card == {"objective": "mdlm", "mask_id": 9, **{k: v for k, v in section.items() if k != "name"}}
    assert objective_from_card(card) == md.for_vocab(9)
    assert objective_from_section("scaled_ar") == ScaledAR()
    for bad, msg in [({"name": "mdlm", "mask_id": 4}, "objective.mask_id: the run assigns it"),
                     ({"name": "mdlm", "noise": "cosine", "speed": 2}, "unknown field 'objective.speed'"),
                     ({"name": "mdlm", "noise": {"name": "sigmoid"}}, "objective.noise.name: 'sigmoid'"),
                     ({"noise": "cosine"}, "objective.name is missing"),
                     ("mlm", "objective: 'mlm' is not one of"), ({"name": "dlm"}, "write objective.name: mdlm"),
                     (["ar"], "expected an objective's name or a mapping")]:
        with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(".", r"\.")):
            objective_from_section(bad)


def test_dlmlab_eval_scores_with_the_loaded_objective_every_field_included(tmp_path, capsys):
    """`dlmlab eval` on a train() run passes the loaded objective on (its t_range and pad_id too), not a
    stand-in rebuilt from the objective's name."""
    from conftest import tiny_transformer

    tok = train_tokenizer("char", TEXT)
    ids = torch.tensor(tok.encode(TEXT))
    obj = MaskedDiffusionObjective(tok.vocab_size, "loglinear", t_range=(0.1, 0.2), pad_id=0)
    model = tiny_transformer(vocab_size=tok.vocab_size + 1, attn_mask="bidirectional")
    train(model, TrainConfig(steps=2, batch_size=4, progress=False),
          lambda step, gen: TokenStream.windows(ids, 4, 8, gen), obj, out_dir=tmp_path / "run", tokenizer=tok)
    (tmp_path / "c.txt").write_text(TEXT)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--source", str(tmp_path / "c.txt"), "--seq-len", "8",
                 "--batches", "2", "--batch-size", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    run = dlmlab.load(tmp_path / "run")
    assert run.objective == obj
    from dlmlab.data import DataConfig, load_corpus

    stream, _ = load_corpus(DataConfig(source=str(tmp_path / "c.txt"), seq_len=8), tok)
    want = evaluate_lm(run.model, obj, stream, 8, 2, 2)
    plain = evaluate_lm(run.model, MaskedDiffusionObjective(tok.vocab_size, "loglinear"), stream, 8, 2, 2)
    assert printed["nelbo"] == want["nelbo"] != plain["nelbo"]


def test_a_registered_objective_runs_through_the_dlmlab_train_pipeline(tmp_path):
    """A run config naming a registered objective (its card as the section) trains with `run_training`, writes
    the section into config.json, and the run loads and resumes with it."""
    from dlmlab.data import DataConfig
    from dlmlab.training.lm import run_config_dict, run_training

    (tmp_path / "c.txt").write_text(TEXT)
    cfg = RunConfig(objective={"name": "scaled_ar", "scale": 0.25},
                    model={"family": "gru", "d_model": 8, "n_layers": 1},
                    data=DataConfig(source=str(tmp_path / "c.txt"), seq_len=8),
                    train=TrainConfig(steps=2, batch_size=4, progress=False), eval_batches=1)
    assert run_config_dict(cfg)["objective"] == {"name": "scaled_ar", "scale": 0.25}
    res = run_training(cfg, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["objective"] == {"name": "scaled_ar",
                                                                                       "scale": 0.25}
    run = dlmlab.load(tmp_path / "run")
    assert run.objective == ScaledAR(0.25) and run.model.cfg.vocab_size == train_tokenizer("char", TEXT).vocab_size
    assert set(res["eval"]) == {"nll", "ppl"} and res["eval"]["ppl"] == pytest.approx(math.exp(res["eval"]["nll"]))
    assert run_training(cfg, tmp_path / "run")["eval"] == res["eval"]  # resumed (finished): the same evaluation

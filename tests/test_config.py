"""Typed configs: unknown / badly typed / out-of-range fields raise ConfigError naming the field."""

from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from dlmlab.config import ConfigError, from_dict, load_yaml, require, to_dict
from dlmlab.models import TransformerConfig
from dlmlab.training import TrainConfig
from dlmlab.training.lm import RunConfig, load_run_config


@dataclass
class Inner:
    n: int = 1
    kind: Literal["a", "b"] = "a"


@dataclass
class Outer:
    name: str
    inner: Inner = field(default_factory=Inner)
    xs: list[float] = field(default_factory=list)
    opt: Optional[int] = None
    flag: bool = False
    rate: float = 0.5

    def validate(self):
        require(self.rate <= 1, f"rate must be <= 1, got {self.rate}")


def test_round_trip_and_coercion():
    o = from_dict(Outer, {"name": "x", "inner": {"n": 3, "kind": "b"}, "xs": [1, 2.5], "opt": 4, "rate": 1})
    assert o.inner == Inner(3, "b") and o.xs == [1.0, 2.5] and isinstance(o.rate, float)
    assert from_dict(Outer, to_dict(o)) == o
    assert from_dict(Outer, {"name": "y", "opt": None}).opt is None


@pytest.mark.parametrize("data,msg", [
    ({"name": "x", "colour": 1}, "unknown field 'colour'"),
    ({"name": "x", "inner": {"m": 1}}, "unknown field 'inner.m'"),
    ({"name": 3}, "name: expected a string, got 3"),
    ({"name": "x", "inner": {"n": "3"}}, "inner.n: expected an integer, got '3'"),
    ({"name": "x", "inner": {"n": True}}, "inner.n: expected an integer"),
    ({"name": "x", "inner": {"n": 1.5}}, "inner.n: expected an integer"),
    ({"name": "x", "inner": {"kind": "c"}}, r"inner.kind: 'c' is not one of \['a', 'b'\]"),
    ({"name": "x", "inner": 5}, "inner: expected a mapping"),
    ({"name": "x", "xs": 1.0}, "xs: expected a list"),
    ({"name": "x", "xs": [1, "a"]}, r"xs\[1\]: expected a number"),
    ({"name": "x", "flag": "yes"}, "flag: expected true/false"),
    ({"name": "x", "rate": True}, "rate: expected a number"),
    ({"name": "x", "opt": "4"}, "opt: expected an integer"),
    ({"name": "x", "rate": 2.0}, "rate must be <= 1"),
    ({}, "missing 1 required positional argument: 'name'"),
])
def test_bad_fields_are_named(data, msg):
    with pytest.raises(ConfigError, match=msg):
        from_dict(Outer, data)


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match="expected a mapping, got list"):
        from_dict(Outer, [1, 2])


@pytest.mark.parametrize("data,msg", [
    ({"steps": 0}, "train.steps must be > 0"),
    ({"lr": -1.0}, "train.lr must be > 0"),
    ({"warmup_steps": 5000}, r"train.warmup_steps must be in \[0, steps\]"),
    ({"schedule": "exp"}, "schedule: 'exp' is not one of"),
    ({"beta2": 1.0}, "beta1/beta2"),
])
def test_train_config_validation(data, msg):
    with pytest.raises(ConfigError, match=msg):
        from_dict(TrainConfig, data)


def test_transformer_config_literals():
    with pytest.raises(ConfigError, match="positions: 'sinusoidal' is not one of"):
        from_dict(TransformerConfig, {"positions": "sinusoidal"})
    assert from_dict(TransformerConfig, {"d_model": 64, "n_heads": 8}).d_head == 8


def test_load_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_yaml(RunConfig, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: [1\n")
    with pytest.raises(ConfigError, match="bad.yaml: line 3 is not valid YAML"):
        load_yaml(RunConfig, bad)  # unknown fields: tests/test_user_errors.py
    typ = tmp_path / "typ.yaml"
    typ.write_text("train:\n  batch_size: 3.5\n")
    with pytest.raises(ConfigError, match="train.batch_size: expected an integer, got 3.5"):
        load_run_config(typ)
    mdlm = tmp_path / "mdlm.yaml"
    mdlm.write_text("objective: mdlm\nmodel:\n  attn_mask: causal\n")
    with pytest.raises(ConfigError, match="mdlm.*bidirectional"):
        load_run_config(mdlm)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_run_config(empty) == RunConfig()


def test_shipped_configs_load():
    from conftest import REPO
    from dlmlab.objectives import ARObjective, LinearSchedule, MaskedDiffusionObjective
    from dlmlab.training.lm import run_config_dict

    want = {  # objective, family, attention mask, seq_len, steps
        "shakespeare_ar": (ARObjective(), "transformer", "causal", 128, 300),
        "shakespeare_mamba_ar": (ARObjective(), "mamba", None, 128, 300),
        "shakespeare_mdlm": (MaskedDiffusionObjective(None, LinearSchedule()), "transformer", "bidirectional", 128,
                             300),
        "tutorial_ar": (ARObjective(), "transformer", "causal", 64, 150),
        "tutorial_mdlm": (MaskedDiffusionObjective(), "transformer", "bidirectional", 64, 150),
    }
    got = {}
    for path in sorted((REPO / "configs").glob("*.yaml")):
        cfg = load_run_config(path)
        got[path.stem] = (cfg.objective, cfg.family, getattr(cfg.model, "attn_mask", None), cfg.data.seq_len,
                          cfg.train.steps)
        assert from_dict(RunConfig, run_config_dict(cfg)) == cfg  # what config.json holds reads back the same
    assert got == want
    # the card form and the bare name are one objective (shakespeare_mdlm.yaml writes the card)
    assert got["shakespeare_mdlm"][0] == got["tutorial_mdlm"][0]

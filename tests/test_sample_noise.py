"""The noise schedule reaches the sampler as an object: ``DecodeConfig.noise`` holds a
:class:`~dlmlab.objectives.schedule.NoiseSchedule` (a name or ``{name, fields}`` is built into one), and
``dlmlab sample`` passes the schedule the model was trained with, its fields included (issue 23)."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from dlmlab.cli.main import main
from dlmlab.config import ConfigError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives.schedule import CosineSchedule, LinearSchedule, LogLinearSchedule
from dlmlab.sampling import DecodeConfig, decode

decode_mod = importlib.import_module("dlmlab.sampling.decode")  # (the package exports the function as `decode`)

CFG = ("objective: mdlm\nmodel: {d_model: 16, n_layers: 1, n_heads: 2, attn_mask: bidirectional, max_seq_len: 32}\n"
       "data: {seq_len: 16}\ntrain: {steps: 1, batch_size: 4, progress: false}\neval_batches: 1\n"
       "noise: {name: loglinear, eps: 0.01}\n")


@pytest.fixture(scope="module")
def loglinear_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("noise")
    (d / "c.yaml").write_text(CFG)
    assert main(["train", str(d / "c.yaml"), "--out", str(d / "run")]) == 0
    return d / "run"


@pytest.fixture
def used(monkeypatch):
    """The schedule objects the decoder's ancestral rule was handed, one per step."""
    seen = []
    real = decode_mod.ancestral_count

    def spy(n_masked, step, steps, generator=None, schedule=None):
        seen.append(schedule)
        return real(n_masked, step, steps, generator, schedule)

    monkeypatch.setattr(decode_mod, "ancestral_count", spy)
    return seen


# ------------------------------------------------------------------------------------- the config
def test_decode_config_noise_is_a_schedule_object():
    assert DecodeConfig().noise == LinearSchedule()
    assert DecodeConfig(noise="loglinear").noise == LogLinearSchedule()
    s = CosineSchedule(eps=0.02)
    assert DecodeConfig(noise=s).noise is s  # kept as given, fields included
    assert DecodeConfig(noise={"name": "loglinear", "eps": 0.01}).noise == LogLinearSchedule(eps=0.01)
    cfg = DecodeConfig(unmask_rule="ancestral", noise=LogLinearSchedule(eps=0.01))
    data = cfg.to_data()
    assert data["noise"] == {"name": "loglinear", "eps": 0.01, "t_lo": 0.001}
    assert json.loads(json.dumps(data)) == data and DecodeConfig(**data) == cfg  # JSON-ready, reads back


@pytest.mark.parametrize("bad, says", [("sigmoid", "'sigmoid' is not one of"), (3, "expected a schedule name or a mapping"),
                                       ({"name": "linear", "bogus": 1}, "bogus"),
                                       ({"name": "cosine", "eps": 2.0}, "eps")])
def test_a_bad_noise_is_a_config_error_naming_the_field(bad, says):
    with pytest.raises(ConfigError, match="noise") as e:
        DecodeConfig(noise=bad)
    assert says in str(e.value) and "\n" not in str(e.value)


def _model():
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=12, d_model=16, n_layers=1, n_heads=2, d_mlp=32, max_seq_len=16,
                                         attn_mask="bidirectional"))


def _canvas(rows=3, prompt=2, gen=8, mask=11):
    x = torch.full((rows, prompt + gen), mask)
    x[:, :prompt] = torch.arange(prompt)
    return x


def test_the_ancestral_rule_uses_the_object_it_is_given(used):
    m, sched = _model(), LogLinearSchedule(eps=0.01)
    decode(m, _canvas(), 2, DecodeConfig(steps=5, unmask_rule="ancestral", noise=sched), torch.Generator().manual_seed(0),
           mask_id=11)
    assert used and all(s is sched for s in used)

    class AllAtOnce(LinearSchedule):  # a schedule of one's own: reveal everything at the first step
        def reveal_prob(self, step: int, steps: int) -> float:
            return 1.0

    res = decode(m, _canvas(), 2, DecodeConfig(steps=5, unmask_rule="ancestral", noise=AllAtOnce()),
                 torch.Generator().manual_seed(0), mask_id=11, record=True)
    assert res.trajectory[0].committed.sum().item() == 3 * 8  # every masked position in step one


def test_default_schedule_outputs_are_unchanged_by_name_or_object():
    m = _model()
    outs = []
    for noise in (None, "linear", LinearSchedule(), {"name": "linear"}):
        kw = {} if noise is None else {"noise": noise}
        cfg = DecodeConfig(steps=6, unmask_rule="ancestral", order="random", **kw)
        outs.append(decode(m, _canvas(), 2, cfg, torch.Generator().manual_seed(3), mask_id=11).tokens)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


# ------------------------------------------------------------------------------------- dlmlab sample
def test_sample_passes_the_trained_schedule_with_its_fields(loglinear_run, used, capsys):
    capsys.readouterr()
    args = ["sample", str(loglinear_run), "--gen-len", "6", "--steps", "4", "--unmask-rule", "ancestral",
            "--format", "jsonl", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["config"]["noise"] == {"name": "loglinear", "eps": 0.01, "t_lo": 0.001}
    assert out.err == ""  # nothing to warn about: the decoder follows the trained schedule as it is
    assert used and all(s == LogLinearSchedule(eps=0.01) for s in used)
    used.clear()
    assert main(args + ["--noise", "cosine"]) == 0  # the override: that schedule, default fields
    assert json.loads(capsys.readouterr().out)["config"]["noise"] == {"name": "cosine", "eps": 0.001, "t_lo": 0.001}
    assert used and all(s == CosineSchedule() for s in used)

"""`dlmlab train` builds the same model as ``build_model`` for the same model section (defaults and matched
widths included), with the same initial weights for the same seed."""

from __future__ import annotations

import json

import pytest
import torch

from dlmlab.cli.main import main
from run_util import write_corpus


SECTIONS = {  # model sections that leave fields to the defaults (and, but for the transformer, the width)
    "transformer": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16},  # d_mlp left out
    "mamba": {"family": "mamba", "d_model": 16, "n_layers": 1, "d_state": 4, "scan": "chunked"},
    "mamba2": {"family": "mamba2", "d_model": 16, "n_layers": 1, "d_state": 8, "headdim": 8},
    "gru": {"family": "gru", "d_model": 16, "n_layers": 1},
}


@pytest.mark.parametrize("objective", ["ar", "mdlm"])
@pytest.mark.parametrize("family", list(SECTIONS))
def test_train_builds_the_model_build_model_builds(tmp_path, monkeypatch, family, objective):
    import dlmlab
    from dlmlab.models.factory import build_model, count_params
    from dlmlab.training import lm

    if objective == "mdlm" and family == "transformer":
        section = dict(SECTIONS[family], attn_mask="bidirectional")
    else:
        section = SECTIONS[family]
    seed = 3
    inits = []
    real_train = lm.train

    def spy(model, *a, **kw):  # the freshly built model `dlmlab train` is about to train
        inits.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real_train(model, *a, **kw)

    monkeypatch.setattr(lm, "train", spy)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"objective: {objective}\nmodel: {json.dumps(section)}\n"
                   f"data: {{source: {write_corpus(tmp_path)}, seq_len: 12}}\n"
                   f"train: {{steps: 1, batch_size: 2, seed: {seed}, progress: false}}\neval_batches: 1\n")
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    run = dlmlab.load(out)
    V = run.tokenizer.vocab_size + (1 if objective == "mdlm" else 0)
    fields = {k: v for k, v in section.items() if k != "family"}
    torch.manual_seed(seed)
    ref = build_model(family, vocab_size=V, **fields)
    assert count_params(run.model) == count_params(ref)
    assert {k: v.shape for k, v in run.model.state_dict().items()} == {k: v.shape for k, v in ref.state_dict().items()}
    assert run.model.cfg == ref.cfg  # every field, the matched width included
    (init,) = inits
    assert init.keys() == ref.state_dict().keys()
    assert all(torch.equal(init[k], v) for k, v in ref.state_dict().items())  # same seed: same weights
    # the run records the resolved config, so it resumes and loads as the same model
    saved = json.loads((out / "config.json").read_text())["model"]
    assert {k: saved[k] for k in fields} == fields and saved.get("vocab_size", 0) == 0


def test_section_config_is_model_config():
    from dlmlab.models.factory import model_config, section_config

    for family, section in SECTIONS.items():
        fields = {k: v for k, v in section.items() if k != "family"}
        assert section_config(section, 30) == model_config(family, vocab_size=30, **fields)
    # a width given in the section is kept, and nothing is matched
    assert section_config({"family": "gru", "d_model": 16, "hidden_size": 7}, 30).hidden_size == 7
    assert section_config({"family": "lstm", "cell": "lstm"}, 30).cell == "lstm"

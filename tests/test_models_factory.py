"""build_model: every architecture, shared hook points, matched parameter counts, clear errors."""

from __future__ import annotations

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.models.factory import ARCHITECTURES, build_model, count_config_params, count_params, model_config, param_table

COMMON = ["embed", "final", "logits"] + [f"blocks.{i}.{p}" for i in range(2) for p in ("resid_pre", "mixer_out",
                                                                                         "resid_post")]
SPECIFIC = {"mamba": ["blocks.0.mixer.conv_out", "blocks.0.mixer.ssm_out"],
            "mamba2": ["blocks.0.mixer.conv_out", "blocks.0.mixer.ssm_out"],
            "lstm": ["blocks.0.rnn_out"], "gru": ["blocks.1.rnn_out"], "transformer": ["blocks.0.attn_out"]}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_arch_builds_runs_and_has_hooks(arch):
    torch.manual_seed(0)
    m = build_model(arch, vocab_size=7, n_out=3, d_model=32, n_layers=2)
    tokens = torch.randint(0, 7, (2, 9))
    with m.cache(COMMON + SPECIFIC[arch]) as c:
        logits = m(tokens)
    assert logits.shape == (2, 9, 3)
    assert set(c) == set(COMMON + SPECIFIC[arch])
    for name in COMMON[:2] + COMMON[3:]:
        assert c[name].shape[:2] == (2, 9) and c[name].dim() == 3, name
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 3), torch.randint(0, 3, (18,)))
    loss.backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


def test_study_shape_counts_are_matched():
    rows = param_table(vocab_size=8, n_out=6, d_model=128, n_layers=4)
    counts = {r["arch"]: r["params"] for r in rows}
    assert set(counts) == set(ARCHITECTURES)
    ref = counts["transformer"]
    # by hand, GPT-2 style (learned positions up to 256, tied input embedding, untied 6-way head without bias):
    # each block has two LayerNorms (2 x 2d), Q/K/V/O with biases (4 (d^2 + d)) and a 4d MLP with biases
    d, n = 128, 4
    block = 2 * 2 * d + 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert ref == 8 * d + 256 * d + n * block + 2 * d + 6 * d == 827_904
    for arch, n in counts.items():
        assert abs(n - ref) / ref < 0.02, (arch, n, ref)
    # the meta-device count is the real count
    m = build_model("mamba2", vocab_size=8, n_out=6)
    assert count_params(m) == counts["mamba2"]


def test_overrides_fix_the_width_and_conv_ablation_keeps_it():
    assert model_config("lstm", vocab_size=5, hidden_size=40).hidden_size == 40
    assert model_config("mamba", vocab_size=5, expand=2).d_inner == 256
    a = model_config("mamba", vocab_size=5)
    b = model_config("mamba", vocab_size=5, use_conv=False)
    assert a.d_inner == b.d_inner and not b.use_conv
    assert count_config_params("mamba", b) < count_config_params("mamba", a)
    unmatched = model_config("gru", vocab_size=5, match_params=False)
    assert unmatched.hidden_size == 128


def test_errors_are_clear():
    with pytest.raises(ConfigError, match="unknown architecture 'rwkv'"):
        build_model("rwkv", vocab_size=5)
    with pytest.raises(ConfigError, match="vocab_size must be a positive integer"):
        build_model("lstm", vocab_size=0)
    with pytest.raises(ConfigError, match="d_model must be a positive integer"):
        build_model("mamba", vocab_size=5, d_model=-4)
    with pytest.raises(ConfigError, match="n_layers"):
        build_model("gru", vocab_size=5, n_layers=0)
    with pytest.raises(ConfigError, match="unknown lstm option 'n_heads'"):
        build_model("lstm", vocab_size=5, n_heads=4)
    with pytest.raises(ConfigError, match="n_heads"):
        build_model("transformer", vocab_size=5, d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="use_conv: expected true/false"):
        build_model("mamba", vocab_size=5, use_conv="no")

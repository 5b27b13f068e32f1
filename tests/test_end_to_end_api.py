"""Issue 19's "done when": every family trains a few steps through `dlmlab train`, loads with
`dlmlab.load`, and takes a layer probe, a mixer-output ablation, activation patching and
`run_with_cache`; a run of Python `train()` loads too, an MDLM run with its mask id."""

from __future__ import annotations

import json

import pytest
import torch

import dlmlab
from dlmlab.analysis.layer_probes import probe_layers, residual_layers
from dlmlab.analysis.patching import patch_positions
from dlmlab.cli.main import main
from dlmlab.rundir.checkpoint import latest_checkpoint

STEPS = 3
T = 12
MODELS = {  # tiny sizes; mamba on the pure-PyTorch scan (the fused one compiles a kernel at first use)
    "transformer": "{family: transformer, d_model: 16, n_layers: 2, n_heads: 2, d_mlp: 32, max_seq_len: 16%s}",
    "mamba": "{family: mamba, d_model: 16, n_layers: 2, d_state: 4, scan: chunked}",
    "mamba2": "{family: mamba2, d_model: 16, n_layers: 2, d_state: 8, headdim: 8}",
    "lstm": "{family: lstm, d_model: 16, n_layers: 2}",
    "gru": "{family: gru, d_model: 16, n_layers: 2}",
}
CASES = [(f, "ar") for f in MODELS] + [("transformer", "mdlm"), ("gru", "mdlm")]


def corpus(tmp_path):
    g = torch.Generator().manual_seed(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "it"]
    text = " ".join(words[i] for i in torch.randint(0, len(words), (900,), generator=g).tolist())
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    return path, text


def train_cli(tmp_path, family: str, objective: str):
    data, text = corpus(tmp_path)
    model = MODELS[family] % (", attn_mask: bidirectional" if objective == "mdlm" else "") \
        if family == "transformer" else MODELS[family]
    cfg = tmp_path / f"{family}.yaml"
    cfg.write_text(f"objective: {objective}\nmodel: {model}\n"
                   f"data: {{source: {data}, tokenizer: char, seq_len: 16}}\n"
                   f"train: {{steps: {STEPS}, batch_size: 4, log_every: 1, progress: false}}\neval_batches: 1\n")
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    return out, text


def batch(run, text: str, B: int = 6) -> torch.Tensor:
    ids = run.tokenizer.encode(text[: B * T])
    return torch.tensor(ids).view(B, T)


def mixer_ablation(model, tokens: torch.Tensor) -> None:
    """Zero- and mean-ablating each block's mixer output changes the logits (and nothing else breaks)."""
    with torch.no_grad():
        clean = model(tokens)
        n_blocks = sum(1 for n in model.hook_points if n.endswith(".mixer_out"))
        assert n_blocks == 2
        for i in range(n_blocks):
            name = f"blocks.{i}.mixer_out"
            with model.replace({name: torch.zeros(())}):
                zero = model(tokens)
            with model.replace({name: lambda x: x.mean(dim=(0, 1), keepdim=True).expand_as(x)}):
                mean = model(tokens)
            for ablated in (zero, mean):
                assert torch.isfinite(ablated).all() and not torch.allclose(ablated, clean)


def patching(model, tokens: torch.Tensor, objective: str) -> None:
    """Pasting the clean input of block 0 at the one corrupted position restores the clean logits."""
    p = T - 3
    corrupted = tokens.clone()
    corrupted[:, p] = (tokens[:, p] + 1) % int(tokens.max() + 1)
    with torch.no_grad():
        delta = (model(tokens)[:, -1] - model(corrupted)[:, -1]).mean(0)
    if objective == "mdlm":
        delta[-1] = 0.0  # (the mask token is never predicted)
    a, b = int(delta.argmax()), int(delta.argmin())
    B = tokens.shape[0]
    res = patch_positions(model, tokens, corrupted, torch.full((B,), a), torch.full((B,), b),
                          hooks=["blocks.0.resid_pre", "blocks.1.mixer_out"], positions=[0, p, T - 1])
    assert res.recovered.shape == (2, 3)
    assert res.recovered[0, 1] == pytest.approx(1.0, abs=1e-3)  # the corrupted position: all restored
    assert res.recovered[0, 0] == pytest.approx(0.0, abs=1e-3)  # a position where the runs agree


def cached_run(model, tokens: torch.Tensor) -> None:
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        assert torch.allclose(logits, model(tokens), atol=1e-5)  # (a full cache may take the unfused path)
    for i in range(2):
        act = cache[f"blocks.{i}.mixer_out"]
        assert act.shape[:2] == tokens.shape
    assert cache["logits"].shape == logits.shape


@pytest.mark.parametrize("family,objective", CASES)
def test_train_load_and_analyse_every_family(tmp_path, family, objective):
    out, text = train_cli(tmp_path, family, objective)
    run = dlmlab.load(out)
    assert (run.family, run.objective, run.format, run.step) == (family, objective, "run", STEPS)
    assert not run.model.training and run.model.family == family
    vocab = run.tokenizer.vocab_size
    assert run.mask_id == (vocab if objective == "mdlm" else None)  # one id past the tokenizer's
    assert run.shift_logits == (objective == "ar")
    assert run.bidirectional == (family == "transformer" and objective == "mdlm")
    assert run.tokenizer.decode(run.tokenizer.encode("the cat")) == "the cat"
    # a checkpoint folder loads alone, to the same weights
    ck = dlmlab.load(latest_checkpoint(out))
    assert ck.format == "checkpoint" and ck.mask_id == run.mask_id and ck.objective == objective
    for (k, v), (k2, v2) in zip(run.model.state_dict().items(), ck.model.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)

    tokens = batch(run, text)
    model = run.model
    probes = probe_layers(model, tokens, tokens % 2, max_samples=200, max_iter=100)
    assert [p.name for p in probes] == residual_layers(model) and len(probes) == 3
    assert all(0.0 <= p.accuracy <= 1.0 and 0.0 <= p.control_accuracy <= 1.0 for p in probes)
    mixer_ablation(model, tokens)
    patching(model, tokens, objective)
    cached_run(model, tokens)


def test_a_run_of_python_train_loads_with_its_mask_id(tmp_path):
    from dlmlab.data.tokenizer import CharTokenizer
    from dlmlab.models.factory import build_model
    from dlmlab.objectives import MaskedDiffusionObjective
    from dlmlab.training import TrainConfig, train

    _, text = corpus(tmp_path)
    tok = CharTokenizer.train(text)
    mask_id = tok.vocab_size
    ids = torch.tensor(tok.encode(text))
    torch.manual_seed(0)
    model = build_model("gru", vocab_size=tok.vocab_size + 1, d_model=16, n_layers=1)

    def batches(step, gen):
        start = torch.randint(0, len(ids) - T, (4,), generator=gen)
        return torch.stack([ids[s:s + T] for s in start.tolist()])

    out = tmp_path / "py"
    train(model, TrainConfig(steps=2, batch_size=4, progress=False, log_every=1), batches,
          MaskedDiffusionObjective(mask_id), out_dir=out, tokenizer=tok)
    run = dlmlab.load(out)
    assert (run.family, run.objective, run.mask_id, run.shift_logits) == ("gru", "mdlm", mask_id, False)
    assert run.tokenizer.chars == tok.chars
    x = torch.tensor(tok.encode(text[:T]))[None]
    with torch.no_grad():
        assert torch.equal(run.model(x), model.eval()(x))
    card = json.loads((out / "model.json").read_text())
    assert card["config"]["vocab_size"] == mask_id + 1 and card["family"] == "gru"

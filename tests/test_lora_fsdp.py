"""LoRA adapters (peft) and FSDP (torchrun, gloo) on tiny toolkit Transformers on CPU.

LoRA: the model's outputs are unchanged when the adapters are added, the loss falls, only the adapters
change (base weights bit-identical), and merging them gives the adapted model's logits.
FSDP through the one training loop, ``train(parallel="fsdp")``: 2 processes (torchrun, gloo) reproduce 1
process on the same global batch: loss per step and every gathered weight within float tolerance, for full
fine-tuning and for LoRA; the same for the reversal fine-tuning entry point (loss, accuracies and signatures).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from dlmlab.config import ConfigError  # noqa: E402
from dlmlab.errors import UserError  # noqa: E402
from dlmlab.training import TrainConfig, train  # noqa: E402
from dlmlab.training.distributed import DistContext  # noqa: E402
from dlmlab.training.lora import LoraSettings, adapter_parameters, add_lora, merge_lora  # noqa: E402

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))
import fsdp_worker as W  # noqa: E402


def test_lora_only_adapters_train_and_loss_falls():
    model = W.build(lora=False, init_std=0.2)  # a frozen unembedding of std 0.02 could hardly move the logits
    x = W.data()[:8]
    with torch.no_grad():
        before = model(x)
    add_lora(model, LoraSettings(r=4, alpha=8.0, targets=["W_q", "W_v", "W_o", "fc_in"]))
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)  # B = 0: nothing changes at the start
    base = {n: p.detach().clone() for n, p in model.named_parameters() if n not in adapter_parameters(model)}
    adapters = {n: p.detach().clone() for n, p in adapter_parameters(model).items()}
    assert len(adapters) == 2 * 4 * 2 and all(p.dtype == torch.float32 for p in adapters.values())
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(adapters)

    def fixed_batch(step, gen):  # one batch with fixed masks, so the loss must fall
        g = torch.Generator().manual_seed(5)
        return {"tokens": x, "t": torch.full((8,), 0.5), "noise": torch.rand(x.shape, generator=g)}

    cfg = TrainConfig(steps=40, batch_size=8, lr=3e-2, warmup_steps=0, schedule="constant", log_every=1,
                      weight_decay=0.01, progress=False)
    hist = train(model, cfg, fixed_batch, W.OBJECTIVE, ctx=DistContext(), parallel="fsdp")
    assert hist[-1]["loss"] < 0.7 * hist[0]["loss"]
    for n, p in model.named_parameters():
        if n in base:
            assert torch.equal(p, base[n]), n  # bit-identical base weights
    assert all(not torch.equal(p, adapters[n]) for n, p in adapter_parameters(model).items() if ".lora_B." in n)
    with torch.no_grad():
        adapted = model(x)
        merge_lora(model)
        assert not adapter_parameters(model) and type(model.blocks[0].attn.W_v) is torch.nn.Linear
        torch.testing.assert_close(model(x), adapted, rtol=1e-5, atol=1e-5)


def test_lora_settings_checked():
    with pytest.raises(ConfigError, match="lora.r"):
        LoraSettings(r=0)
    with pytest.raises(ConfigError, match="unknown layer"):
        LoraSettings(targets=["q_proj"])
    model = add_lora(W.build(lora=False), LoraSettings(r=2))
    with pytest.raises(UserError, match="already has LoRA"):
        add_lora(model, LoraSettings(r=2))


def _run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


TORCHRUN = [str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone"]


@pytest.mark.study
@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_fsdp_two_processes_match_one(tmp_path, subprocess_env):
    _run([sys.executable, str(HERE / "fsdp_worker.py"), str(tmp_path / "one.pt")], subprocess_env)
    _run([*TORCHRUN, str(HERE / "fsdp_worker.py"), str(tmp_path / "two.pt")], subprocess_env)
    ones, twos = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    for mode in ("full", "lora"):
        one, two = ones[mode], twos[mode]
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-5) and len(one["loss"]) == 6
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
        assert one["loss"][-1] < one["loss"][0]
        assert set(one["state"]) == set(two["state"])
        for k, v in one["state"].items():
            torch.testing.assert_close(two["state"][k], v, rtol=1e-4, atol=1e-4, msg=k)
        init = W.build(mode == "lora").state_dict()
        changed = {k for k, v in one["state"].items() if not torch.equal(v, init[k])}
        assert changed == ({k for k in init if ".lora_" in k} if mode == "lora" else set(init)), mode


@pytest.mark.study
@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_reversal_finetune_under_torchrun_matches_one_process(tmp_path, subprocess_env):
    from test_reversal_hf import _tokenizer, make_checkpoint

    ck = make_checkpoint(tmp_path / "llada", "llada", _tokenizer())
    args = ["-m", "dlmlab.studies.reversal.hf_finetune", "--model", str(ck), "--n-facts", "3", "--n-signature-facts",
            "3", "--steps", "4", "--batch-size", "4", "--lr", "0.003", "--eval-every", "2", "--lora",
            "--no-progress", "--device", "cpu"]
    _run([sys.executable, *args, "--out", str(tmp_path / "one")], subprocess_env)
    two = _run([*TORCHRUN, *args, "--out", str(tmp_path / "two")], subprocess_env)
    assert two.stdout.count('"objective"') == 1  # rank 0 alone reports
    a = json.loads((tmp_path / "one" / "results.json").read_text())
    b = json.loads((tmp_path / "two" / "results.json").read_text())
    assert (a["world_size"], b["world_size"]) == (1, 2)
    assert b["final_loss"] == pytest.approx(a["final_loss"], rel=1e-5)
    for key in ("forward_acc", "reverse_acc"):
        assert b[key] == a[key]
    from safetensors.torch import load_file

    wa, wb = load_file(tmp_path / "one" / "adapters.safetensors"), load_file(tmp_path / "two" / "adapters.safetensors")
    assert set(wa) == set(wb) and all(".lora_" in k for k in wa)
    for k, v in wa.items():
        torch.testing.assert_close(wb[k], v, rtol=1e-4, atol=1e-5, msg=k)
    for s, t in zip(a["signatures"], b["signatures"], strict=True):
        for key in ("reverse_p", "reverse_p_control", "forward_p", "grad_cosine", "grad_cosine_control", "attn_corr"):
            assert t[key] == pytest.approx(s[key], rel=1e-4, abs=1e-6), key

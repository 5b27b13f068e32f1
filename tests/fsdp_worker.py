"""Worker for tests/test_lora_fsdp.py: train a tiny toolkit Transformer with ``train(parallel="fsdp")`` (the one
training loop), alone or under ``torchrun`` (FSDP over gloo), and save the loss history and the gathered weights.

    python tests/fsdp_worker.py OUT.pt
    torchrun --nproc_per_node 2 --standalone tests/fsdp_worker.py OUT.pt
"""

import sys

import torch

from dlmlab.models import Transformer
from dlmlab.models.config import TransformerConfig
from dlmlab.objectives import MaskedDiffusionObjective
from dlmlab.training import TrainConfig, train
from dlmlab.training.distributed import init_from_env
from dlmlab.training.fsdp import full_state_dict, shard
from dlmlab.training.lora import LoraSettings, add_lora

V, T, MASK = 40, 12, 39


def build(lora: bool, init_std: float = 0.02) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, mlp="swiglu", norm="rmsnorm",
                            positions="rope", attn_mask="bidirectional", max_seq_len=T, init_std=init_std)
    model = Transformer(cfg)
    return add_lora(model, LoraSettings(r=4, alpha=8.0)) if lora else model


def data() -> torch.Tensor:
    return torch.randint(0, V - 1, (16, T), generator=torch.Generator().manual_seed(3))


def make_batch(step, gen):
    docs = data()
    x = docs[torch.randint(0, len(docs), (8,), generator=gen)]
    return {"tokens": x, "t": torch.rand(8, generator=gen).clamp(min=0.05), "noise": torch.rand(x.shape, generator=gen)}


OBJECTIVE = MaskedDiffusionObjective(MASK)  # the batch's own t / noise are kept (pre-drawn: extra tensors)


def run(lora: bool, ctx) -> dict:
    model = shard(build(lora), ctx)
    cfg = TrainConfig(steps=6, batch_size=8, lr=1e-2, warmup_steps=0, weight_decay=0.01, log_every=1, progress=False)
    hist = train(model, cfg, make_batch, OBJECTIVE, ctx=ctx, parallel="fsdp")
    return {"loss": [r["loss"] for r in hist], "grad_norm": [r["grad_norm"] for r in hist],
            "state": full_state_dict(model)}


def main(out: str) -> None:
    """Full fine-tuning, then LoRA; both results in one file."""
    ctx = init_from_env()
    res = {"full": run(False, ctx), "lora": run(True, ctx)}
    if ctx.is_main:
        torch.save(res, out)
    ctx.barrier()


if __name__ == "__main__":
    main(sys.argv[1])

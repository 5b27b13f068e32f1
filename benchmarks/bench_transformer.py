"""Train-step and cached-forward time of the hooked dlmlab Transformer vs a plain SDPA reference.

Shapes (issue 2): 2 layers, d_model 128, 8 heads, batch 32, seq 128, causal, learned positions,
attention-only and with a 512-wide MLP.  A train step is forward + cross-entropy + backward +
AdamW step.  The reference is written here: fused nn.Linear qkv, F.scaled_dot_product_attention,
no hook points.  Repeats are interleaved (ours, reference, ours, ...) and the median is reported.

Targets: train step <= 1.05x the reference (all hook points present, none attached);
forward with every hook point cached (``with model.cache(): model(x)``, which takes the explicit
attention path to expose the pattern) <= 1.1x the plain forward.

    flock /tmp/dlmlab-cpu.lock .venv/bin/python benchmarks/bench_transformer.py
"""

from __future__ import annotations

import argparse
import fnmatch
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.models import Transformer, TransformerConfig

V, D, L, H, B, T = 256, 128, 2, 8, 32, 128


class RefBlock(nn.Module):
    def __init__(self, d_mlp: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.mlp = None
        if d_mlp:
            self.ln2 = nn.LayerNorm(D)
            self.mlp = nn.Sequential(nn.Linear(D, d_mlp), nn.GELU(approximate="tanh"), nn.Linear(d_mlp, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (a.view(b, t, H, D // H).transpose(1, 2) for a in self.qkv(self.ln1(x)).split(D, dim=2))
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(z.transpose(1, 2).reshape(b, t, D))
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x))
        return x


class RefLM(nn.Module):
    """Plain causal transformer LM of the same shape (no hooks)."""

    def __init__(self, d_mlp: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList([RefBlock(d_mlp) for _ in range(L)])
        self.ln = nn.LayerNorm(D)
        self.unembed = nn.Linear(D, V, bias=False)
        self.unembed.weight = self.tok.weight
        # GPT-2 init, as dlmlab's (N(0,1) embeddings give huge logits whose denormal gradients slow matmuls 50x)
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.unembed(self.ln(x))


def ours(d_mlp: int) -> Transformer:
    cfg = TransformerConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=H, d_mlp=d_mlp, mlp="gelu_new",
                            attn_mask="causal", positions="learned", max_seq_len=T)
    return Transformer(cfg)


def train_step_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()

    return step


def forward_fn(model: nn.Module, x: torch.Tensor, cache: bool | str):
    """cache: False (plain forward), True (every hook point) or a glob of points to leave out."""
    model.eval()

    @torch.no_grad()
    def fwd() -> None:
        if cache is True:
            with model.cache() as c:
                model(x)
            assert "blocks.0.attn.pattern" in c
        elif cache:
            with model.cache(lambda n: not fnmatch.fnmatchcase(n, cache)) as c:
                model(x)
            assert "blocks.0.attn.pattern" not in c and "blocks.0.resid_post" in c
        else:
            model(x)

    return fwd


def race(fns: list, repeats: int, warmup: int) -> list[float]:
    """Median seconds per call of each fn, calls interleaved so load changes hit all alike."""
    for _ in range(warmup):
        for f in fns:
            f()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, B{B} T{T} d{D} L{L} H{H} V{V}, "
          f"median of {args.repeats} interleaved repeats")
    rows = []
    for d_mlp, label in [(0, "attn-only"), (4 * D, "mlp 512")]:
        m, r = ours(d_mlp), RefLM(d_mlp)
        t_ours, t_ref = race([train_step_fn(m, x, y), train_step_fn(r, x, y)], args.repeats, args.warmup)
        rows.append((f"train step, {label}", "dlmlab / plain SDPA", t_ours, t_ref, 1.05))
        t_cache, t_plain, t_most = race([forward_fn(m, x, True), forward_fn(m, x, False),
                                         forward_fn(m, x, "*.attn.[ph]*")], args.repeats, args.warmup)
        rows.append((f"forward, {label}", "full cache / plain", t_cache, t_plain, 1.10))
        rows.append((f"forward, {label}", "cache -pattern,head_out", t_most, t_plain, None))
        t_plain_ours, t_plain_ref = race([forward_fn(m, x, False), forward_fn(r, x, False)], args.repeats, args.warmup)
        rows.append((f"forward, {label}", "dlmlab / plain SDPA", t_plain_ours, t_plain_ref, None))
    print(f"{'measurement':<22} {'comparison':<24} {'ms':>8} {'ref ms':>8} {'ratio':>6} {'target':>7}  ok")
    for name, comp, a, b, target in rows:
        ratio = a / b
        ok = "-" if target is None else ("yes" if ratio <= target else "NO")
        tgt = "-" if target is None else f"<={target:.2f}"
        print(f"{name:<22} {comp:<24} {a * 1e3:8.2f} {b * 1e3:8.2f} {ratio:6.3f} {tgt:>7}  {ok}")


if __name__ == "__main__":
    main()

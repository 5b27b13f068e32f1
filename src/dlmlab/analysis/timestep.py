"""Implicit timestep of a masked-diffusion model: does the residual stream encode the mask rate?

* :func:`mask_rate_probe`: corrupt sequences at mask rates t ~ U(0, 1) (or a given range), read the residual stream
  at ``blocks.0.resid_pre`` (the embedding) and after every block, and fit a ridge probe
  (:func:`dlmlab.analysis.probes.probe_regression`, split by sequence) of the sequence's actual
  mask fraction from single positions -> held-out R^2 per layer and the probe direction.
  ``r2_pooled``: the same probe from the sequence's mean residual vector; ``r2_control``: the
  per-position probe refit on labels shuffled across sequences (the control task).
* :func:`patch_mask_rate`: on a low-corruption input, replace the component of the residual
  stream along the probe direction by its value on a high-corruption input (same clean tokens,
  same positions) and measure the change of prediction entropy at the masked positions; the
  same shift along a random direction is the control.
* :func:`mean_shift_patch`: the sequence-level difference-of-means shift (mean residual at the
  high rate minus at the low rate, over positions unmasked in both; fitted on half the sequences)
  added at every position of the other half's low-rate inputs; entropy change at their masked
  positions against ``n_random`` equal-norm random shifts.

Needs only the residual stream of the model protocol (:mod:`dlmlab.models.protocol`), so it runs on
every family; the points are :func:`dlmlab.analysis.layers.residual_layers` (``blocks.0.resid_pre``
first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from dlmlab.analysis.heads import model_device, row_chunks
from dlmlab.analysis.layers import residual_layers
from dlmlab.analysis.probes import control_labels, probe_regression
from dlmlab.analysis.requires import require_hooks
from dlmlab.objectives.mdlm import corrupt, log_probs_no_mask


@dataclass
class ProbeReport:
    points: list[str]
    r2: list[float]  # held-out R^2 per point
    train_r2: list[float]
    directions: list[np.ndarray] = field(repr=False)  # unit [D] per point (raw activation space)
    r2_pooled: list[float] = field(default_factory=list)  # probe of the sequence-mean residual vector
    r2_control: list[float] = field(default_factory=list)  # per-position probe on shuffled labels

    @property
    def best(self) -> int:
        return int(np.argmax(self.r2))


@torch.no_grad()
def mask_rate_probe(model, tokens: torch.Tensor, mask_id: int, positions_per_seq: int = 8, seed: int = 0,
                    alpha: float = 1.0, chunk: int = 64, t_range: tuple[float, float] = (0.0, 1.0)) -> ProbeReport:
    """tokens [B, T] clean -> ridge probe of the global mask fraction at each residual point.

    Sequences are corrupted at rates t ~ U(t_range) (use the range the model was trained on).
    """
    B, T = tokens.shape
    lo, hi = t_range
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"t_range must satisfy 0 <= lo < hi <= 1, got {t_range}")
    if B < 8:
        raise ValueError(f"need at least 8 sequences for a held-out probe, got {B}")
    gen = torch.Generator().manual_seed(seed)
    t = lo + (hi - lo) * torch.rand(B, generator=gen)
    noisy, masked = corrupt(tokens, t, mask_id, gen)
    frac = masked.float().mean(1)  # actual global mask fraction [B]
    points = residual_layers(model)  # blocks.0.resid_pre, then every blocks.{i}.resid_post
    P = min(positions_per_seq, T)
    pos = torch.rand(B, T, generator=gen).argsort(1)[:, :P]  # [B, P] sampled positions per sequence
    rows = torch.arange(B)[:, None].expand(B, P)
    feats: dict[str, list[torch.Tensor]] = {n: [] for n in points}
    pooled: dict[str, list[torch.Tensor]] = {n: [] for n in points}
    was = model.training
    model.eval()
    dev = model_device(model)
    for sl in row_chunks(B, chunk):
        with model.cache(points) as c:
            model(noisy[sl].to(dev))
        local = torch.arange(sl.stop - sl.start)[:, None].expand(-1, P)
        for n in points:
            feats[n].append(c[n][local.to(dev), pos[sl].to(dev)].float().cpu())  # [b, P, D]
            pooled[n].append(c[n].float().mean(1).cpu())  # [b, D]
    model.train(was)
    y = frac[:, None].expand(B, P).reshape(-1)
    groups = rows.reshape(-1)
    y_shuffled = torch.as_tensor(control_labels(frac, seed=seed))[:, None].expand(B, P).reshape(-1)
    r2, tr2, dirs, r2p, r2c = [], [], [], [], []
    for name in points:
        X = torch.cat(feats[name]).reshape(B * P, -1)
        res = probe_regression(X, y, groups=groups, seed=seed, alpha=alpha)
        r2.append(res.score)
        tr2.append(res.train_score)
        dirs.append(res.direction)
        r2c.append(probe_regression(X, y_shuffled, groups=groups, seed=seed, alpha=alpha).score)
        r2p.append(probe_regression(torch.cat(pooled[name]), frac, seed=seed, alpha=alpha).score)
    return ProbeReport(points, r2, tr2, dirs, r2p, r2c)


def prediction_entropy(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Entropy (nats) [..] of the prediction with the mask token excluded."""
    logp = log_probs_no_mask(logits, mask_id)
    return -(logp.exp() * logp.clamp(min=-1e9)).sum(-1)


@torch.no_grad()
def patch_mask_rate(model, tokens: torch.Tensor, mask_id: int, point: str, direction, low: float = 0.15,
                    high: float = 0.8, seed: int = 0, chunk: int = 64) -> dict[str, float]:
    """Entropy change at masked positions of a low-corruption input when the probe direction is patched in.

    Returns {entropy_clean, entropy_patched, delta, delta_random, probe_shift, n_masked, low, high} (entropies
    in nats, means over the masked positions of the low-rate input; probe_shift = mean projection change).
    """
    if not 0.0 < low < high <= 1.0:
        raise ValueError(f"need 0 < low < high <= 1, got low={low}, high={high}")
    require_hooks(model, [point], "patch_mask_rate")
    gen = torch.Generator().manual_seed(seed)
    B = tokens.shape[0]
    x_low, m_low = corrupt(tokens, torch.full((B,), low), mask_id, gen)
    x_high, _ = corrupt(tokens, torch.full((B,), high), mask_id, gen)
    d = torch.as_tensor(np.asarray(direction), dtype=torch.float32)
    d = d / d.norm()
    r = torch.randn(d.shape, generator=gen)
    r = r - (r @ d) * d
    r = r / r.norm()
    dev = model_device(model)
    d, r = d.to(dev), r.to(dev)
    was = model.training
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)
    shift_sum = 0.0
    for sl in row_chunks(B, chunk):
        lo_x, hi_x, sel = x_low[sl].to(dev), x_high[sl].to(dev), m_low[sl].to(dev)
        with model.cache([point]) as c:
            model(hi_x)
        a_high = c[point] @ d.to(c[point].dtype)  # [b, T]
        with model.cache([point]) as c:
            base_logits = model(lo_x)
        shift = a_high - c[point] @ d.to(c[point].dtype)
        shift_sum += float(shift.sum())

        def run_with(vec: torch.Tensor) -> torch.Tensor:
            with model.hooks({point: lambda x, hp: x + shift[..., None] * vec.to(x.dtype)}):
                return model(lo_x)

        for i, logits in enumerate((base_logits, run_with(d), run_with(r))):
            sums[i] += float(prediction_entropy(logits.float(), mask_id)[sel].sum())
    model.train(was)
    n = int(m_low.sum())
    h0, h1, h2 = (sums / max(n, 1)).tolist()
    return {"entropy_clean": h0, "entropy_patched": h1, "delta": h1 - h0, "delta_random": h2 - h0,
            "probe_shift": shift_sum / tokens.numel(), "n_masked": n, "low": low, "high": high}


def nested_masks(shape: tuple[int, int], low: float, high: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked at rate ``low``, masked at rate ``high``) [B, T] from one uniform draw: low's mask is inside high's."""
    u = torch.rand(shape, generator=gen)
    return u < low, u < high


@torch.no_grad()
def mean_shift_patch(model, tokens: torch.Tensor, mask_id: int, point: str = "blocks.0.resid_post",
                     low: float = 0.05, high: float = 0.5, n_random: int = 20, seed: int = 0,
                     chunk: int = 64) -> dict:
    """Entropy change at masked positions when the difference-of-means mask-rate shift is added at ``point``.

    tokens [B, T] clean (B >= 4).  The shift [D] = mean ``point`` activation at rate ``high`` minus at rate
    ``low`` over positions unmasked in both (nested masks), fitted on the first half of the sequences and
    added at every position of the second half's low-rate inputs.  Control: ``n_random`` Gaussian vectors
    scaled to the shift's norm.  Returns {delta, random_deltas, random_p95, entropy_clean, shift_norm, ...}
    (entropies in nats, means over the masked positions of the held-out low-rate inputs).
    """
    if not 0.0 < low < high <= 1.0:
        raise ValueError(f"need 0 < low < high <= 1, got low={low}, high={high}")
    require_hooks(model, [point], "mean_shift_patch")
    B = tokens.shape[0]
    if B < 4:
        raise ValueError(f"need at least 4 sequences (half to fit, half to test), got {B}")
    gen = torch.Generator().manual_seed(seed)
    m_low, m_high = nested_masks(tuple(tokens.shape), low, high, gen)
    mask = torch.full_like(tokens, mask_id)
    x_low, x_high = torch.where(m_low, mask, tokens), torch.where(m_high, mask, tokens)
    fit, test = slice(0, B // 2), slice(B // 2, B)
    dev = model_device(model)
    was = model.training
    model.eval()

    def acts(x: torch.Tensor) -> torch.Tensor:
        out = []
        for sl in row_chunks(x.shape[0], chunk):
            with model.cache([point]) as c:
                model(x[sl].to(dev))
            out.append(c[point].float().cpu())
        return torch.cat(out)  # [b, T, D]

    both = ~m_high[fit]  # unmasked at both rates
    shift = acts(x_high[fit])[both].mean(0) - acts(x_low[fit])[both].mean(0)  # [D]
    vecs = [shift] + [v / v.norm() * shift.norm() for v in torch.randn(n_random, shift.shape[0], generator=gen)]
    sel = m_low[test]
    xt = x_low[test]

    def entropy(vec: torch.Tensor | None) -> float:
        total = 0.0
        for sl in row_chunks(xt.shape[0], chunk):
            if vec is None:
                logits = model(xt[sl].to(dev))
            else:
                with model.hooks({point: lambda a, hp: a + vec.to(device=a.device, dtype=a.dtype)}):
                    logits = model(xt[sl].to(dev))
            total += float(prediction_entropy(logits.float(), mask_id)[sel[sl].to(dev)].sum())
        return total / max(1, int(sel.sum()))

    h0 = entropy(None)
    deltas = [entropy(v) - h0 for v in vecs]
    model.train(was)
    rand = deltas[1:]
    return {"point": point, "low": low, "high": high, "entropy_clean": h0, "delta": deltas[0], "random_deltas": rand,
            "random_p95": float(np.percentile(rand, 95)) if rand else float("nan"),
            "shift_norm": float(shift.norm()), "n_masked": int(sel.sum()), "n_fit_seqs": B // 2}

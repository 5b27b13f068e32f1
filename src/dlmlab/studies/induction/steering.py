"""The implicit timestep during real sampling: read the mask-rate direction at every step, and steer it.

The induction study finds that a masked-diffusion transformer encodes the global mask rate in its residual
stream (:mod:`dlmlab.analysis.timestep`).  Here that reading is taken *during real decoding*:

* :func:`fit_reader`: a ridge probe of the sequence's mask rate from single positions at ``point``, fitted on
  held-out sequences corrupted at rates ``t ~ U(t_range)`` (the model's training range); or
  :func:`reader_from_direction`: a given direction (e.g. the study's probe) calibrated by a 1-D fit.
* :func:`run_steering`: decode prompts (``prompt = seq_len - t_max * seq_len`` clean tokens, so decoding starts
  at the highest trained mask rate) with threshold decoding, caching ``point`` at every step: the reader's
  prediction (mean over positions) against the canvas's actual mask rate, step by step.  Then the same
  decode (same seed) with the unit direction times ``alpha`` added at every position and step (``+``), or
  subtracted (``-``), and with ``n_random`` Gaussian directions of the same norm added.  ``alpha`` is fixed in
  advance: the shift that moves the reader's prediction by the width of the training range.
  Measured per decode: per-step entropy (mean over steps and rows of the candidates' mean entropy) and
  tokens committed per step (per row: positions filled / steps at which it had candidates).
* :func:`steering_claim`: adding the direction raises entropy and lowers tokens per step, removing it does the
  opposite, each judged against the random directions by the project's control test
  (:func:`~dlmlab.report.intervals.control_test`: one-sided permutation p-value
  ``(1 + #random at least as extreme) / (1 + n_random)``; :func:`~dlmlab.report.claims.verdict_from_control`:
  p <= 0.05 reproduced, p > 0.5 (no better than the random median) contradicted, else underpowered).
  :func:`steering_tables`, :func:`steering_figure` report it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from dlmlab.analysis.heads import model_device
from dlmlab.analysis.probes import probe_regression
from dlmlab.errors import UserError
from dlmlab.objectives.mdlm import corrupt
from dlmlab.progress import bar
from dlmlab.report.claims import CONTROL_ALPHA, Claim, Judgement, claim, combine, verdict_from_control
from dlmlab.report.intervals import MIN_CONTROL_DRAWS, control_test
from dlmlab.report.results import Table
from dlmlab.sampling import DecodeConfig, decode
from dlmlab.sampling.interventions import Intervention
from dlmlab.sampling.trajectory_cache import run_sampler_with_cache

MIN_RANDOM = MIN_CONTROL_DRAWS  # 200
LEVEL = CONTROL_ALPHA  # 0.05


@dataclass
class MaskRateReader:
    """A linear read-out of the mask rate at hook point ``point``: ``t_hat = act @ w + b`` (raw activations)."""

    point: str
    w: torch.Tensor  # [D]
    b: float
    r2: float  # held-out R^2 of the fit (per position)

    def predict(self, acts: torch.Tensor) -> torch.Tensor:
        """acts [..., D] -> predicted mask rate [...]."""
        return acts.double() @ self.w.double() + self.b

    @property
    def direction(self) -> torch.Tensor:
        return self.w / self.w.norm()


@torch.no_grad()
def _features(model, tokens: torch.Tensor, mask_id: int, point: str, t_range, seed: int, per_seq: int):
    """(X [B*P, D] activations at sampled positions, y [B*P] the sequence's mask rate, groups [B*P])."""
    lo, hi = t_range
    B, T = tokens.shape
    gen = torch.Generator().manual_seed(seed)
    t = lo + (hi - lo) * torch.rand(B, generator=gen)
    noisy, masked = corrupt(tokens, t, mask_id, gen)
    P = min(per_seq, T)
    pos = torch.rand(B, T, generator=gen).argsort(1)[:, :P]
    dev = model_device(model)
    with model.cache([point]) as c:
        model(noisy.to(dev))
    X = c[point].float().cpu()[torch.arange(B)[:, None], pos].reshape(B * P, -1)
    y = masked.float().mean(1)[:, None].expand(B, P).reshape(-1)
    return X, y, torch.arange(B)[:, None].expand(B, P).reshape(-1)


def fit_reader(model, tokens: torch.Tensor, mask_id: int, point: str = "blocks.0.resid_post",
               t_range: tuple[float, float] = (0.0, 1.0), seed: int = 0, per_seq: int = 8) -> MaskRateReader:
    """Ridge probe of the mask rate from single positions at ``point`` (clean ``tokens`` [B,T], B >= 8)."""
    X, y, groups = _features(model, tokens, mask_id, point, t_range, seed, per_seq)
    res = probe_regression(X, y, groups=groups, seed=seed)
    scale = np.where(res.scaler.scale_ > 0, res.scaler.scale_, 1.0)
    w = res.model.coef_ / scale
    b = float(res.model.intercept_ - res.scaler.mean_ @ w)
    return MaskRateReader(point, torch.as_tensor(w, dtype=torch.float64), b, res.score)


def reader_from_direction(model, tokens: torch.Tensor, mask_id: int, direction, point: str = "blocks.0.resid_post",
                          t_range: tuple[float, float] = (0.0, 1.0), seed: int = 0, per_seq: int = 8) -> MaskRateReader:
    """A given direction [D] (e.g. the induction study's probe) calibrated to mask rates by least squares."""
    d = torch.as_tensor(np.asarray(direction), dtype=torch.float64)
    d = d / d.norm()
    X, y, _ = _features(model, tokens, mask_id, point, t_range, seed, per_seq)
    proj = X.double() @ d
    A = torch.stack([proj, torch.ones_like(proj)], 1)
    a, c = torch.linalg.lstsq(A, y.double()[:, None]).solution[:, 0].tolist()
    pred = a * proj + c
    r2 = float(1 - ((pred - y) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    return MaskRateReader(point, a * d, c, r2)


def decode_stats(res) -> dict:
    """Per-step entropy (mean over steps and rows of the candidates' mean entropy) and tokens per step
    (per row: positions filled / steps at which it had candidates, averaged) of a recorded decode."""
    ent = torch.stack([r.entropy for r in res.trajectory]).cpu()  # [S, B, N]
    active = ~torch.isnan(ent).all(2)  # [S, B]
    per_step = torch.nanmean(ent, 2)[active]
    filled = torch.stack([r.committed for r in res.trajectory]).sum((0, 2)).double().cpu()  # [B]
    tps = filled / active.sum(0).clamp(min=1)
    return {"entropy": float(per_step.mean()), "tokens_per_step": float(tps.mean()), "steps": int(res.steps)}


@dataclass
class SteeringResult:
    point: str
    reader_r2: float
    alpha: float
    threshold: float
    n_prompts: int
    prompt_len: int
    predicted: list[list[float]]  # [S][B] reader's mean prediction per step and row (NaN: row not run)
    actual: list[list[float]]  # [S][B] actual mask rate of the canvas
    reading_r2: float
    reading_corr: float
    base: dict
    add: dict
    remove: dict
    random: list[dict] = field(default_factory=list)

    def deltas(self, key: str) -> tuple[float, float, np.ndarray]:
        """(add - base, remove - base, random - base [n]) of ``entropy`` or ``tokens_per_step``."""
        b = self.base[key]
        return self.add[key] - b, self.remove[key] - b, np.array([r[key] - b for r in self.random])

    def control(self, key: str, which: str, side: int):
        """:func:`~dlmlab.report.intervals.control_test` of ``which`` (add / remove) against the random
        directions: ``side`` +1 asks whether its change is higher than the random ones', -1 lower."""
        add, rem, rnd = self.deltas(key)
        return control_test(add if which == "add" else rem, rnd, side)

    def p_value(self, key: str, which: str, side: int) -> float:
        """One-sided permutation p of :meth:`control`: (1 + #random at least as extreme) / (1 + n)."""
        return self.control(key, which, side).p

    @classmethod
    def from_dict(cls, d: dict) -> "SteeringResult":
        """Rebuild from :meth:`to_dict` (results.json), e.g. to re-judge a stored run."""
        rand = [{"entropy": e, "tokens_per_step": t} for e, t in zip(d["random_entropy"], d["random_tokens_per_step"])]
        return cls(d["point"], d["reader_r2"], d["alpha"], d["threshold"], d["n_prompts"], d["prompt_len"],
                   d.get("predicted", []), d.get("actual", []), d["reading_r2"], d["reading_corr"], d["base"],
                   d["add"], d["remove"], rand)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("point", "reader_r2", "alpha", "threshold", "n_prompts", "prompt_len",
                                              "reading_r2", "reading_corr", "base", "add", "remove", "predicted",
                                              "actual")} | {
            "random_entropy": [r["entropy"] for r in self.random],
            "random_tokens_per_step": [r["tokens_per_step"] for r in self.random]}


@torch.no_grad()
def run_steering(model, mask_id: int, tokens: torch.Tensor, *, t_range: tuple[float, float] = (0.0, 1.0),
                 point: str = "blocks.0.resid_post", direction=None, n_random: int = MIN_RANDOM, n_prompts: int = 16,
                 threshold: float = 0.9, seed: int = 0, progress: bool = True) -> SteeringResult:
    """Read and steer the mask-rate direction during threshold decoding of ``model`` (a trained masked-diffusion
    Transformer with hook points; ``mask_id``).  ``tokens`` [M, T]: held-out clean sequences (M >= n_prompts + 8):
    the last ``n_prompts`` rows give the prompts, the others fit the reader (``direction`` given: calibrate it).
    ``t_range``: the mask rates the model was trained on."""
    if n_random < MIN_RANDOM:
        raise UserError(f"n_random must be >= {MIN_RANDOM} (the permutation test's control), got {n_random}")
    M, T = tokens.shape
    if M < n_prompts + 8:
        raise UserError(f"need at least n_prompts + 8 = {n_prompts + 8} sequences, got {M}")
    fit_rows, prompts = tokens[:M - n_prompts], tokens[M - n_prompts:]
    if direction is None:
        reader = fit_reader(model, fit_rows, mask_id, point, t_range, seed)
    else:
        reader = reader_from_direction(model, fit_rows, mask_id, direction, point, t_range, seed)
    P = T - max(1, int(round(t_range[1] * T)))
    canvas = prompts.clone().to(model_device(model))
    canvas[:, P:] = mask_id
    cfg = DecodeConfig(threshold=threshold, order="confidence")
    was = model.training
    model.eval()
    traj = run_sampler_with_cache(model, canvas, P, cfg, torch.Generator().manual_seed(seed), names_filter=[point],
                                  mask_id=mask_id)
    acts = traj.stack(point)  # [S, B, N, D] (NaN where a row was not run)
    pred = torch.nanmean(reader.predict(acts), 2)  # [S, B]
    actual = traj.mask_rates().double()  # [S, B]
    ok = ~torch.isnan(pred)
    pv, av = pred[ok], actual[ok]
    r2 = float(1 - ((pv - av) ** 2).sum() / ((av - av.mean()) ** 2).sum())
    corr = float(torch.corrcoef(torch.stack([pv, av]))[0, 1])

    alpha = float((t_range[1] - t_range[0]) / reader.w.norm())
    d = reader.direction.float() * alpha

    pbar = bar(total=3 + n_random, desc="steering decodes (plain, +, -, random)", unit="decode",
               disable=not progress)

    def run(vec: torch.Tensor | None) -> dict:
        ivs = None if vec is None else [Intervention(point, vec, mode="add")]
        res = decode(model, canvas, P, cfg, torch.Generator().manual_seed(seed), mask_id=mask_id, record=True,
                     interventions=ivs)
        pbar.update(1)
        return decode_stats(res)

    base, add, remove = run(None), run(d), run(-d)
    gen = torch.Generator().manual_seed(seed + 1)
    rand = []
    for _ in range(n_random):
        r = torch.randn(d.shape[0], generator=gen)
        rand.append(run(r / r.norm() * alpha))
    pbar.close()
    model.train(was)
    nan = float("nan")
    return SteeringResult(point, reader.r2, alpha, threshold, n_prompts, P,
                          pred.nan_to_num(nan).tolist(), actual.tolist(), r2, corr, base, add, remove, rand)


def _part(res: SteeringResult, key: str, which: str, side: int, what: str) -> Judgement:
    """The project's control verdict (:func:`~dlmlab.report.claims.verdict_from_control`): p <= 0.05 reproduced,
    no better than the random directions' median (p > 0.5) contradicted, in between underpowered."""
    return verdict_from_control(res.control(key, which, side), what)


def steering_claim(res: SteeringResult) -> Claim:
    """Adding the mask-rate direction raises per-step entropy and lowers tokens per step; removing it lowers
    entropy and raises tokens per step; each against >= 200 random directions of the same norm (p < 0.05)."""
    parts = [_part(res, "entropy", "add", +1, "add: entropy"),
             _part(res, "tokens_per_step", "add", -1, "add: tokens/step"),
             _part(res, "entropy", "remove", -1, "remove: entropy"),
             _part(res, "tokens_per_step", "remove", +1, "remove: tokens/step")]
    j = combine(parts)
    ps = {f"p_{w}_{k}": res.p_value(k, w, s) for w, k, s in (("add", "entropy", 1), ("add", "tokens_per_step", -1),
                                                             ("remove", "entropy", -1), ("remove", "tokens_per_step", 1))}
    return claim("mask_rate_steering",
                 f"During threshold decoding (threshold {res.threshold}), adding the mask-rate direction read at "
                 f"{res.point} (norm: a shift of the training range in the reader's prediction) raises per-step "
                 f"entropy and lowers tokens committed per step, and removing it does the opposite, more than "
                 f"{len(res.random)} random directions of the same norm (one-sided permutation p <= {LEVEL} each)",
                 j.verdict == "reproduced", judgement=j, n_random=len(res.random), alpha=res.alpha,
                 reading_r2=res.reading_r2, base=res.base, add=res.add, remove=res.remove, **ps)


def steering_tables(res: SteeringResult) -> list[Table]:
    """The reading along trajectories and the steering against random directions."""
    reading = Table("Implicit timestep during real decoding: the mask-rate reader along threshold-decoding "
                    "trajectories", ["hook point", "reader R^2 (fit)", "R^2 along trajectories",
                                     "correlation", "prompts", "prompt length"],
                    [[res.point, res.reader_r2, res.reading_r2, res.reading_corr, res.n_prompts, res.prompt_len]])
    rows = []
    for key in ("entropy", "tokens_per_step"):
        add, rem, rnd = res.deltas(key)
        rows.append([key, res.base[key], add, res.p_value(key, "add", 1 if key == "entropy" else -1), rem,
                     res.p_value(key, "remove", -1 if key == "entropy" else 1), float(rnd.mean()),
                     float(np.percentile(rnd, 2.5)), float(np.percentile(rnd, 97.5))])
    steer = Table(f"Steering the mask-rate direction during threshold decoding (norm {res.alpha:.3g}; "
                  f"{len(res.random)} random directions of the same norm)",
                  ["measure", "unsteered", "add: change", "add: p", "remove: change", "remove: p",
                   "random: mean change", "random: 2.5%", "random: 97.5%"], rows,
                  note="p: one-sided permutation p-value against the random directions, (1 + #as extreme) / (1 + n)")
    return [reading, steer]


def steering_figure(res: SteeringResult, out_dir) -> dict:
    """Predicted vs actual mask rate along the trajectories, and the steering effects against the random
    directions' -> ``{"path", "caption"}`` (figures/mask_rate_steering.png)."""
    from dlmlab.report.figures import new_figure, save_figure

    fig, ax = new_figure(3, 1, width=4.2, height=3.4)
    pred, act = np.array(res.predicted, dtype=float), np.array(res.actual, dtype=float)
    for b in range(pred.shape[1]):
        ax[0, 0].plot(act[:, b], pred[:, b], "-", color="tab:blue", alpha=0.35, lw=1)
    lim = [0, max(1e-3, float(np.nanmax(act)))]
    ax[0, 0].plot(lim, lim, "k--", lw=0.8)
    ax[0, 0].set(xlabel="actual mask rate of the canvas", ylabel="reader's prediction",
                 title=f"reading during decoding (R^2 {res.reading_r2:.2f})")
    for i, key in enumerate(("entropy", "tokens_per_step")):
        add, rem, rnd = res.deltas(key)
        a = ax[0, i + 1]
        a.hist(rnd, bins=30, color="0.7", label=f"{len(rnd)} random")
        a.axvline(add, color="tab:red", label="+ direction")
        a.axvline(rem, color="tab:green", label="- direction")
        a.set(xlabel=f"change in {key.replace('_', ' ')}", ylabel="directions")
        a.legend(fontsize=7)
    return save_figure(fig, out_dir, "mask_rate_steering",
                       "Left: the mask-rate reader's prediction against the canvas's actual mask rate at every step of "
                       "threshold decoding (one line per prompt). Middle, right: change in per-step entropy and in "
                       "tokens committed per step when the mask-rate direction is added (+) or removed (-), against "
                       "random directions of the same norm.")


def run_on_recipe(out, preset: str = "cpu", depth: int = 2, steps: int | None = None, n_random: int = MIN_RANDOM,
                  n_prompts: int = 32, threshold: float = 0.9, progress: bool = True):
    """Train the induction study's DLM (``preset``'s recipe, depth ``depth``, ``steps`` training steps: the preset's
    by default, the curriculum's text phase capped to fit) and run :func:`run_steering` on held-out rows drawn as
    the study draws its probe rows; writes ``out/results.json``, ``out/report.md`` and the figure.  Returns the
    :class:`~dlmlab.report.results.StudyResult`."""
    import dataclasses
    import time
    from pathlib import Path

    from dlmlab.report.results import StudyResult, write_study
    from dlmlab.studies.induction.presets import PRESETS
    from dlmlab.studies.induction.train import load_data, train_model
    from dlmlab.tasks.repeated import mixed_batch

    t0 = time.time()
    p = PRESETS[preset]
    if steps is not None:
        p = dataclasses.replace(p, steps=steps, text_steps=min(p.text_steps, max(0, steps * 3 // 4)), ckpt_every=0)
    p = dataclasses.replace(p, depths=[depth])
    torch.set_num_threads(max(1, p.threads))
    data = load_data(p)
    model, _ = train_model(p, data, depth, "dlm", None, progress=progress)
    model.eval()
    rows = mixed_batch(data.val_ids, p.probe_seqs, p.seq_len, p.p_repeated, data.lo, data.hi,
                       torch.Generator().manual_seed(p.seed + 2), p.min_half)
    res = run_steering(model, data.vocab.mask_id, rows, t_range=(p.t_min, p.t_max), n_random=n_random,
                       n_prompts=n_prompts, threshold=threshold, seed=p.seed, progress=progress)
    out = Path(out)
    fig = steering_figure(res, out)
    result = StudyResult("mask_rate_steering", preset, {**dataclasses.asdict(p), "n_random": n_random,
                                                        "n_prompts": n_prompts, "threshold": threshold},
                         results=res.to_dict(), tables=steering_tables(res), figures=[fig],
                         claims=[steering_claim(res)], wall_time_s=time.time() - t0,
                         setup=f"induction DLM L{depth} ({preset} recipe, {p.steps} steps), mask-rate reader at "
                               f"{res.point}, threshold decoding {threshold}, {n_prompts} prompts, {n_random} random "
                               "directions")
    write_study(out, result, "Steering the implicit timestep during decoding")
    return result


def main(argv=None) -> int:
    """``python -m dlmlab.studies.induction.steering --out DIR [--preset cpu] [--steps N] [--depth 2]``."""
    import argparse

    from dlmlab.report.results import markdown_table

    ap = argparse.ArgumentParser(prog="python -m dlmlab.studies.induction.steering", description=main.__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--n-random", type=int, default=MIN_RANDOM)
    ap.add_argument("--n-prompts", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.9)
    a = ap.parse_args(argv)
    r = run_on_recipe(a.out, a.preset, a.depth, a.steps, a.n_random, a.n_prompts, a.threshold)
    for t in r.tables:
        print(markdown_table(t), "\n")
    c = r.claims[0]
    print(f"claim {c.id}: {c.judgement.label()}" + (f" ({c.detail})" if c.detail else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

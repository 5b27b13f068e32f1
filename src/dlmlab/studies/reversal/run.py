"""Orchestrate the reversal study: train every (kind x PE x seed), aggregate, compute claims, write outputs."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from dlmlab.report import StudyResult, Table, claim, write_study
from dlmlab.studies.reversal import figures
from dlmlab.studies.reversal.presets import PRESETS, ReversalPreset
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.reversal.synthetic import run_one
from dlmlab.studies.threads import threads_for, torch_threads

TITLE = "Reversal curse in masked diffusion vs autoregressive models (storage-routing)"

# Fixed before any run (see docs/reversal.md): thresholds of the claims.
ARM_FWD_MIN = 0.9  # ARM forward accuracy counted as "high"
ARM_REV_MAX = 0.05  # ARM reverse accuracy counted as "near 0"
MDM_RISE = 5.0  # MDM final reverse probability / initial reverse probability
PE_TOL = 0.01  # tolerance of the PE ordering on the reverse-probability AUC
LABELS = {"mdm": "MDM", "mdm_mdlm": "MDM (MDLM)", "arm": "ARM"}


def _ms(vals) -> tuple[float, float]:
    a = np.asarray(vals, dtype=float)
    return float(np.nanmean(a)), float(np.nanstd(a))


def _pm(vals) -> str:
    m, s = _ms(vals)
    return f"{m:.3f} ± {s:.3f}"


def _flat(**groups: dict) -> dict:
    """Evidence as flat scalars (``reverse_acc_rope`` ...) so report.md can show every value."""
    return {f"{name}_{k}": v for name, d in groups.items() for k, v in d.items()}


def auc(run: dict, key: str = "rev_p") -> float:
    """Mean of ``key`` over the logged training steps (step 0 included): speed and extent of transfer."""
    return float(np.mean([row[key] for row in run["history"]]))


def summarize(runs: list[dict], kinds, positions) -> dict:
    """Per (kind, PE): mean/std over seeds of the final metrics, AUC and diagnostics."""
    out = {}
    for kind in kinds:
        for pe in positions:
            g = [r for r in runs if r["kind"] == kind and r["positions"] == pe]
            if not g:
                continue
            s = {k: _ms([r["final"][k] for r in g]) for k in g[0]["final"]}
            s["initial_rev_p"] = _ms([r["initial_rev_p"] for r in g])
            s["rev_auc"] = _ms([auc(r) for r in g])
            s["param_cos_auc"] = _ms([auc(r, "param_cos") for r in g])
            s["min_grad_cos_over_training"] = float(min(
                np.mean([r["history"][i]["grad_cos"] for r in g]) for i in range(len(g[0]["history"]))))
            for k in ("fwd_evidence_alpha", "rev_evidence_alpha", "fwd_evidence_routed", "rev_evidence_routed",
                      "storage_margin", "corr_train_distance"):
                if k in g[0]["diagnostics"]:
                    s[k] = _ms([r["diagnostics"][k] for r in g])
            s["n_seeds"] = len(g)
            out[f"{kind}/{pe}"] = s
    return out


def make_claims(summary: dict, positions: list[str], kinds: list[str]) -> list:
    claims = []
    get = lambda kind, pe, k: summary[f"{kind}/{pe}"][k][0]  # noqa: E731  (mean over seeds)

    if "arm" in kinds:
        fwd = {pe: get("arm", pe, "fwd_acc") for pe in positions}
        rev = {pe: get("arm", pe, "rev_acc") for pe in positions}
        holds = all(fwd[pe] >= ARM_FWD_MIN and rev[pe] <= ARM_REV_MAX for pe in positions)
        claims.append(claim("arm_fails_reverse",
                            f"The ARM trained on 'A is B' reaches forward accuracy >= {ARM_FWD_MIN} but reverse "
                            f"accuracy <= {ARM_REV_MAX} on 'B is' -> A, for every positional encoding (mean over seeds).",
                            holds, **_flat(forward_acc=fwd, reverse_acc=rev)))
    else:
        claims.append(claim("arm_fails_reverse", "ARM not trained in this preset", None))

    if "mdm" in kinds:
        init = {pe: get("mdm", pe, "initial_rev_p") for pe in positions}
        final = {pe: get("mdm", pe, "rev_p") for pe in positions}
        acc = {pe: get("mdm", pe, "rev_acc") for pe in positions}
        holds = all(final[pe] >= MDM_RISE * init[pe] for pe in positions)
        extra = {}
        if "mdm_mdlm" in kinds:
            extra = _flat(mdlm_initial_reverse_p={pe: get("mdm_mdlm", pe, "initial_rev_p") for pe in positions},
                          mdlm_final_reverse_p={pe: get("mdm_mdlm", pe, "rev_p") for pe in positions})
        claims.append(claim("mdm_transfers_reverse",
                            f"Under forward-only training ('[M] is B' -> A) the MDM's probability of A on the never-seen "
                            f"reverse query 'B is [M]' rises at least {MDM_RISE:g}x above its value at initialisation, "
                            "for every positional encoding (mean over seeds).",
                            holds, **_flat(initial_reverse_p=init, final_reverse_p=final, final_reverse_acc=acc), **extra))

        order = [pe for pe in ("alibi", "rope", "learned") if pe in positions]
        aucs = {pe: get("mdm", pe, "rev_auc") for pe in order}
        if len(order) >= 2:
            holds = all(aucs[a] >= aucs[b] - PE_TOL for a, b in zip(order, order[1:]))
            strict = all(aucs[a] >= aucs[b] for a, b in zip(order, order[1:]))
            extra = {}
            if "mdm_mdlm" in kinds:
                extra = _flat(mdlm_reverse_p_auc={pe: get("mdm_mdlm", pe, "rev_auc") for pe in order},
                              mdlm_final_reverse_acc={pe: get("mdm_mdlm", pe, "rev_acc") for pe in order})
            claims.append(claim("pe_ordering",
                                f"Reverse transfer of the MDM orders ALiBi >= RoPE >= learned absolute positions, measured "
                                f"by the reverse probability averaged over training (AUC; ties within {PE_TOL}).",
                                holds, strict_order=strict,
                                **_flat(reverse_p_auc=aucs, final_reverse_acc={pe: get("mdm", pe, "rev_acc") for pe in order}),
                                **extra))
        else:
            claims.append(claim("pe_ordering", "needs at least two positional encodings", None))

        corr = {pe: get("mdm", pe, "corr_train_distance") for pe in positions}
        extra = _flat(mdlm_correlation={pe: get("mdm_mdlm", pe, "corr_train_distance") for pe in positions}) \
            if "mdm_mdlm" in kinds else {}
        claims.append(claim("attention_correlation_positive",
                            "In the trained MDM the pre-softmax attention scores [M]->B of the forward and the reverse "
                            "query are positively correlated across facts at the training distance, for every positional "
                            "encoding (mean over seeds).",
                            all(np.isfinite(c) and c > 0 for c in corr.values()), **_flat(correlation=corr), **extra))

        mins = {pe: summary[f"mdm/{pe}"]["min_grad_cos_over_training"] for pe in positions}
        arm = {pe: summary[f"arm/{pe}"]["min_grad_cos_over_training"] for pe in positions} if "arm" in kinds else {}
        mdlm = {pe: summary[f"mdm_mdlm/{pe}"]["min_grad_cos_over_training"] for pe in positions} \
            if "mdm_mdlm" in kinds else {}
        claims.append(claim("gradient_alignment_positive",
                            "For the MDM the forward-loss and reverse-loss gradients on the storage column Y[:, B] have "
                            "positive cosine at every logged training step, for every positional encoding (mean over "
                            "seeds and facts).",
                            all(v > 0 for v in mins.values()), **_flat(mdm_min_cosine=mins, mdlm_min_cosine=mdlm, arm_min_cosine=arm)))
    return claims


def tables(summary: dict, kinds, positions, chance: float) -> list[Table]:
    rows = []
    for kind in kinds:
        for pe in positions:
            s = summary.get(f"{kind}/{pe}")
            if s is None:
                continue
            rows.append([LABELS[kind], pe, f"{s['fwd_acc'][0]:.3f} ± {s['fwd_acc'][1]:.3f}",
                         f"{s['rev_acc'][0]:.3f} ± {s['rev_acc'][1]:.3f}",
                         f"{s['rev_p'][0]:.3f} ± {s['rev_p'][1]:.3f}", f"{s['rev_auc'][0]:.3f} ± {s['rev_auc'][1]:.3f}",
                         s["n_seeds"]])
    t1 = Table("Forward and reverse accuracy (mean ± std over seeds), synthetic facts",
               ["model", "positions", "forward acc", "reverse acc", "reverse p(A)", "reverse p AUC", "seeds"], rows,
               note=f"Forward = the trained query (MDM '[M] is B' -> A, ARM 'A is' -> B); reverse = 'B is [M]' / 'B is' "
                    f"-> A, never trained. Chance accuracy = {chance:.4f}.")
    rows = []
    for kind in kinds:
        for pe in positions:
            s = summary.get(f"{kind}/{pe}")
            if s is None:
                continue
            f = lambda k: f"{s[k][0]:.3f}" if k in s else "n/a"  # noqa: E731
            rows.append([LABELS[kind], pe, f("fwd_evidence_alpha"), f("rev_evidence_alpha"), f("fwd_evidence_routed"),
                         f("rev_evidence_routed"), f("storage_margin"), f("corr_train_distance"),
                         f"{s['min_grad_cos_over_training']:.3f}", f"{s['param_cos_auc'][0]:.3f}"])
    t2 = Table("Storage-routing diagnostics at the end of training (mean over seeds)",
               ["model", "positions", "alpha fwd", "alpha rev", "routed logit fwd", "routed logit rev",
                "storage margin", "score corr (train dist)", "min storage grad cos", "mean param grad cos"], rows,
               note="alpha: attention from the query to the evidence token (summed over heads); routed logit: "
                    "sum_h alpha_h * S_h[target, evidence]; storage margin: Y[A_k, B_k] - mean_a Y[a, B_k] of the "
                    "position-invariant OV storage (the evidence the reverse query needs); storage grad cos: minimum "
                    "over training of the storage-column gradient cosine; param grad cos: full-parameter gradient "
                    "cosine of the forward and reverse losses averaged over training.")
    return [t1, t2]


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    """Run the study with the named preset; writes results.json, report.md and figures/ into ``out``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for the reversal study; choose from {sorted(PRESETS)}")
    cfg: ReversalPreset = PRESETS[preset]
    cfg.validate()
    return run_preset(cfg, preset, Path(out), progress)


def run_preset(cfg: ReversalPreset, name: str, out: Path, progress: bool = True) -> StudyResult:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    workers = default_workers(cfg.device)
    threads = threads_for(cfg.model.d_model)
    with torch_threads(threads):
        grid = [(cfg, kind, pe, seed, progress) for seed in cfg.seeds for kind in cfg.kinds for pe in cfg.positions]
        runs = map_jobs(run_one, grid, workers, desc="reversal runs", progress=progress, threads=threads)
        summary = summarize(runs, cfg.kinds, cfg.positions)
        chance = runs[0]["chance"]
        claims = make_claims(summary, list(cfg.positions), list(cfg.kinds))
        tabs = tables(summary, cfg.kinds, cfg.positions, chance)
        figs = [figures.reverse_probability_figure(runs, cfg.kinds, cfg.positions, chance, out),
                figures.gradient_cosine_figure(runs, cfg.kinds, cfg.positions, out)]
        mdm_kinds = [k for k in cfg.kinds if k.startswith("mdm")]
        if mdm_kinds:
            figs.insert(0, figures.attention_correlation_figure(runs, mdm_kinds, cfg.positions, cfg.task.gap + 1, out))
    results = {"summary": summary, "runs": runs, "chance": chance}
    if cfg.real.enabled:
        from dlmlab.studies.reversal.real import real_claim, real_table, run_real

        with torch_threads(threads_for(cfg.real.model.d_model)):
            real = run_real(cfg.real, cfg.seeds[0], progress, cfg.device, workers=workers)
        results["real"] = real
        tabs.append(real_table(real))
        claims.append(real_claim(real))
    setup = (
        f"{len(cfg.seeds)} seeds x {{{', '.join(cfg.kinds)}}} x positions {{{', '.join(cfg.positions)}}}: "
        f"{cfg.model.n_layers}-layer transformer (d_model={cfg.model.d_model}, heads={cfg.model.n_heads}, "
        f"d_mlp={cfg.model.d_mlp}, norm={cfg.model.norm}), MDM bidirectional with absorbing mask, ARM causal, "
        f"identical otherwise. Task: {cfg.task.n_pairs} synthetic facts 'A is B' (disjoint entity sets, "
        f"{cfg.task.gap} relation token). Forward-only training: MDM on '[M] is B' -> A only (given mask); "
        f"MDM_MDLM with random MDLM masks of 'A is B' (any-order objective); ARM next-token on 'A is B'; "
        f"{cfg.train.steps} AdamW steps, batch {cfg.train.batch_size}, lr {cfg.train.lr}. Reverse queries are "
        f"evaluated only. Claims are computed on the given-mask MDM (the study's forward-only setting); the "
        f"MDLM-trained MDM is reported beside it (evidence keys with 'mdlm')."
    )
    res = StudyResult(study="reversal", preset=name, config=dataclasses.asdict(cfg), results=results, tables=tabs,
                      figures=figs, claims=claims, wall_time_s=time.time() - t0, setup=setup)
    write_study(out, res, TITLE)
    return res

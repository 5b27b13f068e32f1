"""Figures: held-out PPL vs adaptation steps per method; generative PPL vs sampling steps; quality / speed."""

from __future__ import annotations

from pathlib import Path

from dlmlab.report.figures import new_figure, save_figure


def ppl_curves(res: dict, out: Path) -> dict:
    fig, ax = new_figure()
    ax = ax[0, 0]
    for name, m in res["methods"].items():
        rows = m.get("curve", [])
        style = "--" if not m.get("bound") else "-"
        line, = ax.plot([r["step"] for r in rows], [r["ppl"] for r in rows], style, marker="o", ms=3, label=name)
        seeds = m.get("curves", [])
        if len(seeds) > 1:  # the band spans the seeds' curves
            ax.fill_between([r["step"] for r in rows], [min(c) for c in zip(*([r["ppl"] for r in c] for c in seeds))],
                            [max(c) for c in zip(*([r["ppl"] for r in c] for c in seeds))], color=line.get_color(),
                            alpha=0.15, lw=0)
    thr = (res.get("threshold") or {}).get("ppl")
    if thr:
        ax.axhline(thr, color="grey", lw=0.8, ls=":", label="threshold (midway between plateaus)")
    ax.set_yscale("log")
    ax.set_xlabel("adaptation step")
    ax.set_ylabel("held-out PPL (diffusion: ELBO bound)")
    ax.legend(fontsize=7)
    return save_figure(fig, out, "ppl_vs_steps",
                       "Held-out perplexity of the target given the prompt during adaptation, per method: mean over "
                       "seeds, band = the seeds' range (diffusion methods: ELBO upper bound; AR control dashed, exact)")


def gen_ppl_vs_sampling_steps(res: dict, out: Path) -> dict:
    fig, ax = new_figure()
    ax = ax[0, 0]
    by_method: dict[str, list] = {}
    for key, v in res["samples"].items():
        if "@" in key:
            m, s = key.split("@")
            by_method.setdefault(m, []).append((int(s), v["gen_ppl"]))
    for m, pts in by_method.items():
        pts.sort()
        ax.plot([s for s, _ in pts], [g for _, g in pts], marker="o", label=m)
    if "ar_control" in res["samples"]:
        ax.axhline(res["samples"]["ar_control"]["gen_ppl"], color="k", ls="--", lw=1, label="AR control")
    if "reference" in res:
        ax.axhline(res["reference"]["gen_ppl"], color="grey", ls=":", lw=1, label="held-out text")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("denoising steps")
    ax.set_ylabel(f"generative PPL ({res.get('gen_ppl_judge', 'judge')})")
    ax.legend(fontsize=7)
    return save_figure(fig, out, "gen_ppl_vs_sampling_steps",
                       f"Generative perplexity of samples (scored by the {res.get('gen_ppl_judge', 'judge')}) vs denoising steps")


def quality_speed(res: dict, out: Path) -> dict:
    fig, ax = new_figure()
    ax = ax[0, 0]
    for key, sp in res["speed"].items():
        s = res["samples"].get(key)
        if s is None:
            continue
        ax.scatter(sp["tokens_per_s"], s["gen_ppl"], s=30)
        ax.annotate(key, (sp["tokens_per_s"], s["gen_ppl"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens / s (higher = faster)")
    ax.set_ylabel("generative PPL (lower = better)")
    return save_figure(fig, out, "quality_speed",
                       "Quality / speed trade-off: diffusion at each step count vs KV-cached AR decoding")


def make_figures(res: dict, out: Path) -> list[dict]:
    return [ppl_curves(res, out), gen_ppl_vs_sampling_steps(res, out), quality_speed(res, out)]

"""Induction-circuit heads measured two ways: on unmasked sequences and on the 15%-masked evaluation ones.

The study scores a DLM's heads on its evaluation input (repeated random rows with 15% of positions
masked).  A head can look different on clean input, so the same three scores are measured here on up
to three inputs, each from *one* forward pass (cheap enough to repeat at every checkpoint):

* ``masked``: the first ``n`` 15%-masked evaluation rows (DLM only: the AR model never sees a mask);
* ``random``: the first ``n`` evaluation rows ``[r r]`` (random ids, distinct per half), unmasked;
* ``text``: ``[w w]``, a held-out text window ``w`` of half the length, repeated, unmasked.

Scores ([L, H], 1 = a perfect head), with ``half = T // 2``:

* ``prev`` / ``next``: mean attention from position q to q - 1 / q + 1 over every q where it exists
  (:func:`dlmlab.analysis.heads.previous_token_scores` / ``next_token_scores``);
* ``induction``: DLM: mean attention from q to its copy q - half over the second half's queries (the
  study's "target -> source" attention, here from every query and not only from masked targets); AR:
  the TransformerLens score, q -> q - half + 1 for q >= half (:func:`dlmlab.analysis.induction.ar_induction_scores`);
* ``induction_masked_queries`` (inputs with masks only): the DLM score over masked queries only, the
  closest to the study's own score (one masked target per row).

:func:`summarise` reduces the checkpoint curves to, per input and score, the best head at the end,
the first step it reaches the formation threshold, and its midpoint step (``analysis.emergence.jump_step``,
the definition of the accuracy curve's jump step), so "does the layer-0 previous-token head form
before or after the induction jump" can be answered per input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from dlmlab.analysis.emergence import jump_step
from dlmlab.analysis.heads import attention_patterns
from dlmlab.studies.induction.claims import INDUCTION_THRESHOLD, PREV_NEXT_THRESHOLD
from dlmlab.studies.induction.train import StudyObjective

CONDITIONS: tuple[str, ...] = ("masked", "random", "text")
SCORES: tuple[str, ...] = ("prev", "next", "induction")
N_SEQS = 16  # rows per input: a few suffice for a mean attention weight, and every checkpoint repeats it


def repeated_text(text_tokens: torch.Tensor, n: int) -> torch.Tensor:
    """text windows [B, T] -> [min(n, B), T]: the first half of each window, twice (``[w w]``)."""
    T = text_tokens.shape[1]
    if T % 2:
        raise ValueError(f"text windows need an even length, got {T}")
    w = text_tokens[:n, : T // 2]
    return torch.cat([w, w], dim=1)


def twoway_inputs(eval_tokens: torch.Tensor, masked_tokens: torch.Tensor | None, text_tokens: torch.Tensor | None,
                  n: int = N_SEQS) -> dict[str, torch.Tensor]:
    """{condition: tokens [n, T]}: ``masked`` (if given), ``random`` (eval rows), ``text`` (if given).

    eval_tokens [B, T] repeated rows; masked_tokens [B, T] the same rows with masks (DLM) or None (AR);
    text_tokens [B', T] held-out text windows or None.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    out = {}
    if masked_tokens is not None:
        if masked_tokens.shape != eval_tokens.shape:
            raise ValueError(f"masked_tokens {tuple(masked_tokens.shape)} must match eval_tokens "
                             f"{tuple(eval_tokens.shape)}")
        out["masked"] = masked_tokens[:n]
    out["random"] = eval_tokens[:n]
    if text_tokens is not None:
        if text_tokens.shape[1] != eval_tokens.shape[1]:
            raise ValueError(f"text windows have length {text_tokens.shape[1]}, eval rows {eval_tokens.shape[1]}")
        out["text"] = repeated_text(text_tokens, n)
    return out


def _diag_mean(pat: torch.Tensor, offset: int, skip: int = 0, weight: torch.Tensor | None = None) -> torch.Tensor:
    """pat [B, H, T, T] -> [H]: mean of pat[b, h, q, q + offset] over b and the valid queries after the first
    ``skip``; ``weight`` [B, n_q] (optional, 0/1) selects queries."""
    d = pat.diagonal(offset=offset, dim1=-2, dim2=-1)[..., skip:]  # [B, H, n_q]
    if weight is None:
        return d.sum(dim=(0, 2)) / (d.shape[0] * d.shape[2])
    w = weight[:, None, :].to(d.dtype)
    return (d * w).sum(dim=(0, 2)) / w.sum().clamp_min(1.0)


@torch.no_grad()
def head_scores(model, tokens: torch.Tensor, objective: StudyObjective) -> dict[str, torch.Tensor]:
    """tokens [B, T] repeated rows (possibly with masks) -> {"prev", "next", "induction"[, "induction_masked_queries"]}
    each [L, H], from one forward pass (see the module docstring for the definitions); the model's ``objective``
    decides the induction score's convention (masked model or next-token) and gives the mask id."""
    if not isinstance(objective, StudyObjective):
        raise ValueError(f"objective must be a StudyObjective (train.study_objective), got {objective!r}")
    B, T = tokens.shape
    if T % 2 or T < 4:
        raise ValueError(f"repeated rows need an even length >= 4, got {T}")
    half = T // 2
    pats = attention_patterns(model, tokens)
    layers = sorted(pats)
    out = {"prev": torch.stack([_diag_mean(pats[i], -1) for i in layers]),
           "next": torch.stack([_diag_mean(pats[i], 1) for i in layers])}
    if not objective.masked:  # TransformerLens: q -> q - half + 1, queries q >= half (first diagonal entry q = half-1)
        out["induction"] = torch.stack([_diag_mean(pats[i], -(half - 1), skip=1) for i in layers])
        return out
    out["induction"] = torch.stack([_diag_mean(pats[i], -half) for i in layers])  # queries q = half .. T-1
    if objective.mask_id is not None:
        masked_q = tokens[:, half:] == objective.mask_id  # [B, half]
        if bool(masked_q.any()):
            out["induction_masked_queries"] = torch.stack([_diag_mean(pats[i], -half, weight=masked_q) for i in layers])
    return out


def all_scores(model, inputs: dict[str, torch.Tensor], objective: StudyObjective) -> dict:
    """{condition: head_scores(...)} for every input (one forward each)."""
    return {c: head_scores(model, x, objective) for c, x in inputs.items()}


def best(scores: torch.Tensor, min_layer: int = 0, layer: int | None = None) -> tuple[list[int], float]:
    """([layer, head], score) of the highest entry of scores [L, H] in ``layer`` (or in layers >= ``min_layer``)."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    lo, hi = (layer, layer + 1) if layer is not None else (min_layer, s.shape[0])
    sub = s[lo:hi]
    flat = int(sub.argmax())
    li, h = lo + flat // s.shape[1], flat % s.shape[1]
    return [li, h], float(s[li, h])


def _first_at(curve: list[tuple[int, float]], thr: float) -> int | None:
    return next((s for s, v in curve if v >= thr), None)


def _score_spec(name: str, n_layers: int) -> dict | None:
    """Which heads a score's best is taken over: layer 0 for prev/next, layers >= 1 for induction."""
    if name in ("prev", "next"):
        return {"layer": 0, "threshold": PREV_NEXT_THRESHOLD}
    if n_layers < 2:
        return None
    return {"min_layer": 1, "threshold": INDUCTION_THRESHOLD}


def summarise(final: dict, curves: list[tuple[int, dict]], n_layers: int, accuracy_jump: dict | None = None) -> dict:
    """Reduce scores to what the report needs.

    final: {condition: {score: [L, H]}} of the trained model; curves: [(step, {condition: {score: [L, H]}})]
    over checkpoints; accuracy_jump: ``jump_step`` of the accuracy curve (or None).
    -> {condition: {score: {head, final, curve [(step, best, head)], first_step_at_threshold, threshold,
    midpoint_step, before_accuracy_jump}}}; ``induction_masked_queries`` is summarised like ``induction``.
    """
    jump = (accuracy_jump or {}).get("midpoint_step")
    out: dict = {}
    for cond, sc in final.items():
        out[cond] = {}
        for name in sc:
            spec = _score_spec("induction" if name.startswith("induction") else name, n_layers)
            if spec is None:
                continue
            thr = spec.pop("threshold")
            head, val = best(sc[name], **spec)
            curve = []
            for step, per_cond in curves:
                m = per_cond.get(cond, {}).get(name)
                if m is not None:
                    h, v = best(m, **spec)
                    curve.append((step, v, h))
            pts = [(s, v) for s, v, _ in curve]
            first = _first_at(pts, thr) if pts else None
            out[cond][name] = {"head": head, "final": val, "threshold": thr, "curve": curve,
                               "first_step_at_threshold": first,
                               "midpoint_step": jump_step(pts)["midpoint_step"] if pts else None,
                               "before_accuracy_jump": None if first is None or jump is None else first <= jump}
    return out


def compare_runs(paths: list[str | Path]) -> str:
    """A markdown table of the two-ways head summary of each run's results.json (one row per run, model, input)."""
    lines = ["| run | random ids | model | input | acc jump step | prev L0 head: final (first step >= thr) | "
             "next L0 head: final (first step >= thr) | induction head: final (first step >= thr) |",
             "|---|---|---|---|---|---|---|---|"]
    for p in paths:
        res = json.loads(Path(p).read_text())
        ids = res.get("config", {}).get("random_ids")
        for key in sorted(res["results"]["models"], key=lambda k: (int(k.rsplit("L", 1)[-1]), k)):
            m = res["results"]["models"][key]
            tw = m.get("heads_twoways")
            if not tw:
                continue
            jump = m.get("emergence", {}).get("midpoint_step")
            for cond, sc in tw["summary"].items():
                cells = []
                for name in ("prev", "next", "induction"):
                    s = sc.get(name)
                    if s is None:
                        cells.append("-")
                        continue
                    where = "L{}H{}".format(*s["head"])
                    cells.append(f"{where} {s['final']:.2f} ({s['first_step_at_threshold']})")
                lines.append(f"| {Path(p).parent.name} | {ids} | {key} | {cond} | {jump} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """python -m dlmlab.studies.induction.heads_twoways RUN/results.json [RUN2/results.json ...]"""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m dlmlab.studies.induction.heads_twoways RESULTS.json [RESULTS.json ...]", file=sys.stderr)
        return 2
    print(compare_runs(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The state study's claims, computed from the per-cell measurements (never hand-set).

This module holds the layer-profile claims and :func:`all_claims`; the mechanism claims (ablations, readability
vs causality, Conv1D) are in :mod:`.claims_mech`, the shared rules (which cells count, profile descriptors and
margins, seeds) in :mod:`.claims_base`, whose docstring explains them.  ``seed_cells`` maps ``(arch, task)`` to
the cells of its further seeds (probes only), when the preset trains them (``profile_seeds``).
"""

from __future__ import annotations

from dlmlab.report import Claim
from dlmlab.report.claims import REPRODUCED, combine, contradicted, not_run
from dlmlab.studies.state.claims_base import (  # noqa: F401  (re-exported: the study's claim vocabulary)
    ABLATION_MARGIN, BESIDE_ARCHS, CAUSAL_MARGIN, EQUIV_LEVEL, EQUIV_MARGIN, GRADUAL_MAX_SHARE, GRADUAL_MIN_GAIN,
    LATE_ARCHS, MIN_CONV_SEEDS, OOD_MIN_LEN, PREFIX, TOL, _acc, _blocks, _chance_text, _judged, _none_counted, _p,
    _precondition_parts, _split, best_block, budget_only, budget_parts, cells_n, early_margin, gradual_margin, gradual_row, groups_of, is_early,
    is_late, is_learned, largest_jump_layer, late_margin, margin_verdict, profile_kinds, split_groups)
from dlmlab.studies.state.claims_mech import (  # noqa: F401
    causal_block, conv1d, conv_drop_grid, direction_ablation, equivalence_verdict, readability_causality, split_row)


# ------------------------------------------------------------------------------------------ layer-profile claims
def _seeds_text(info: dict) -> str:
    return f", over seeds {info['interval_text']}" if "interval_text" in info else ""


def late_in_recurrent(cells, seed_cells=None, skipped=None) -> Claim:
    st = ("Prefix tasks enter late in recurrent models: for Mamba and LSTM on Parity and S3 (each must have learned "
          "its task, in most of its seeds), the largest increase of probe accuracy from one layer to the next enters "
          "the last layer (the late margin > 0; over several seeds its 95% t-interval; GRU reported beside them, not "
          "counted)")
    cid = "prefix_tasks_late_in_recurrent"
    keys = [(a, t) for a in LATE_ARCHS for t in PREFIX]
    budget = budget_parts(skipped, [f"{a}/{t}" for a, t in keys])
    groups = groups_of(cells, seed_cells, keys)
    if not groups and budget:
        return budget_only(cid, st, [f"{a}/{t}" for a, t in keys if f"{a}/{t}" in skipped])
    if not groups:
        return _judged(cid, st, not_run("Mamba / LSTM not run on parity/s3"),
                       reason="Mamba / LSTM were not run on parity/s3")
    beside = {k: {"probe_accuracy": _acc(g[0]), "largest_jump_enters": largest_jump_layer(_acc(g[0])),
                  "late": is_late(g[0]), "learned": is_learned(g[0])}
              for k, g in groups_of(cells, None, [(a, t) for a in BESIDE_ARCHS for t in PREFIX]).items()}
    got, lists = split_groups(groups)
    if not got:
        return _none_counted(cid, st, lists)
    per, parts = {}, []
    for k, g in got.items():
        c = g[0]
        j, info = margin_verdict(k, [late_margin(_acc(x)) for x in g], "late margin",
                                 f"largest jump enters layer {largest_jump_layer(_acc(c))} of {cells_n(c)}")
        per[k] = dict(info, probe_accuracy=_acc(c), largest_jump_enters=largest_jump_layer(_acc(c)), late=is_late(c),
                      n_seeds=len(g), verdict=j.label())
        parts.append(j)
    text = "; ".join(f"{k}: largest jump enters layer {r['largest_jump_enters']} of {cells_n(got[k][0])} (probe by "
                     f"layer {_p(r['probe_accuracy'])}){_seeds_text(r)}" for k, r in per.items())
    text += "; beside: " + "; ".join(f"{k}: enters layer {v['largest_jump_enters']}" for k, v in beside.items())
    return _judged(cid, st, combine(parts + _precondition_parts(lists) + budget), measured=text + _chance_text(lists),
                   n_cells=len(got), n_late=sum(r["late"] for r in per.values()), not_run_budget=[
                       f"{a}/{t}" for a, t in keys if f"{a}/{t}" in (skipped or {})],
                   not_reproduced={k: r for k, r in per.items() if r["verdict"] != "reproduced"},
                   cells=per, beside=beside, **lists,
                   archs_missing=[a for a in LATE_ARCHS if not any(k.startswith(a + "/") for k in groups)])


def gradual_in_transformer(cells, seed_cells=None, skipped=None) -> Claim:
    st = (f"In the Transformer, Parity and S3 probe accuracy builds up gradually over the blocks: gain from the "
          f"first to the last block >= {GRADUAL_MIN_GAIN} and no single block adds more than {GRADUAL_MAX_SHARE:.0%} "
          "of it (the gradual margin > 0; over several seeds its 95% t-interval; both cells must have learned their "
          "task, in most of their seeds)")
    cid = "prefix_tasks_gradual_in_transformer"
    groups = groups_of(cells, seed_cells, [("transformer", t) for t in PREFIX])
    budget = budget_parts(skipped, [f"transformer/{t}" for t in PREFIX])
    if not groups and budget:
        return budget_only(cid, st, [f"transformer/{t}" for t in PREFIX if f"transformer/{t}" in skipped])
    if not groups:
        return _judged(cid, st, not_run("transformer not run on parity/s3"), reason="transformer not run on parity/s3")
    got, lists = split_groups(groups)
    if not got:
        return _none_counted(cid, st, lists)
    rows, parts = {}, []
    for k, g in got.items():
        r = gradual_row(g[0])
        j, info = margin_verdict(k, [gradual_margin(c) for c in g], "gradual margin",
                                 f"gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}")
        rows[k] = dict(r, **info, n_seeds=len(g), verdict=j.label())
        parts.append(j)
    text = "; ".join(f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f} "
                     f"(blocks {_p(r['block_probe_accuracy'])}){_seeds_text(r)}" for k, r in rows.items())
    return _judged(cid, st, combine(parts + _precondition_parts(lists) + budget), measured=text + _chance_text(lists),
                   cells=rows, **lists)


def dyck_inversion(cells, seed_cells=None, skipped=None) -> Claim:
    """Both halves of the study's inversion on Dyck: early in the Transformer, gradual in the recurrent models."""
    st = ("The inversion on Dyck: Dyck depth is best read out early in the Transformer (best block <= half of its "
          "blocks) and builds up gradually in the recurrent models (Mamba and LSTM: gain >= "
          f"{GRADUAL_MIN_GAIN} from the first to the last block, no block adding more than {GRADUAL_MAX_SHARE:.0%} of "
          "it; GRU beside, not counted); every one of these cells must have learned Dyck (in most of its seeds; over "
          "several seeds the 95% t-interval of the early / gradual margin decides)")
    cid = "dyck_early_in_transformer_gradual_in_recurrent"
    need = ["transformer"] + LATE_ARCHS
    groups = groups_of(cells, seed_cells, [(a, "dyck") for a in need])
    missing = [a for a in need if f"{a}/dyck" not in groups]
    if missing and all(f"{a}/dyck" in (skipped or {}) for a in missing):
        return budget_only(cid, st, [f"{a}/dyck" for a in missing])
    if missing:
        return _judged(cid, st, not_run(f"{', '.join(missing)} not run on dyck"),
                       reason=f"{', '.join(missing)} not run on dyck")
    got, lists = split_groups(groups)
    if not got:
        return _none_counted(cid, st, lists)
    rows, parts = {}, []
    for k, g in got.items():
        c = g[0]
        if k.startswith("transformer/"):
            j, info = margin_verdict(k, [early_margin(x) for x in g], "early margin",
                                     f"best block {best_block(c)} of {cells_n(c)}")
            rows[k] = dict(info, half="early", best_block=best_block(c), n_layers=cells_n(c),
                           block_probe_accuracy=_blocks(c).tolist())
        else:
            r = gradual_row(c)
            j, info = margin_verdict(k, [gradual_margin(x) for x in g], "gradual margin",
                                     f"gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}")
            rows[k] = dict(r, **info, half="gradual")
        rows[k].update(n_seeds=len(g), verdict=j.label())
        parts.append(j)
    beside = {k: dict(gradual_row(g[0]), learned=is_learned(g[0]))
              for k, g in groups_of(cells, None, [(a, "dyck") for a in BESIDE_ARCHS]).items()}
    text = "; ".join((f"{k}: best block {r['best_block']} of {r['n_layers']}" if r["half"] == "early" else
                      f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}")
                     + f" (blocks {_p(r['block_probe_accuracy'])}){_seeds_text(r)}" for k, r in rows.items())
    return _judged(cid, st, combine(parts + _precondition_parts(lists)), measured=text + _chance_text(lists),
                   cells=rows, beside=beside, **lists)


def s3_with_parity(cells, seed_cells=None, skipped=None) -> Claim:
    st = ("S3 groups with Parity, not Dyck: for most architectures (every one that learned S3, Parity and Dyck) the "
          "S3 layer profile has the study's descriptors (early / late / gradual, as the other claims define them) of "
          "the Parity profile, and not those of the Dyck profile (per seed; an architecture groups when most of its "
          "seeds that learned all three do)")
    cid = "s3_groups_with_parity"
    tasks = ("s3", "parity", "dyck")
    per, lists, ran = {}, {"not_learned": {}, "at_chance": [], "partial": []}, False
    for a in sorted({a for a, _ in cells}):
        groups = groups_of(cells, seed_cells, [(a, t) for t in tasks])
        if len(groups) < 3:
            continue
        ran = True
        got, ls = split_groups(groups)
        lists = {k: ({**v, **ls[k]} if isinstance(v, dict) else v + ls[k]) for k, v in lists.items()}
        if len(got) < 3:
            continue
        seeds = []
        for i in range(min(len(g) for g in groups.values())):  # seed i of every task, where all three learned
            cs = {t: groups[f"{a}/{t}"][i] for t in tasks}
            if all(is_learned(c) for c in cs.values()):
                kinds = {t: profile_kinds(c) for t, c in cs.items()}
                seeds.append({"kinds": kinds, "grouped": kinds["s3"] == kinds["parity"] != kinds["dyck"]})
        if seeds:
            per[a] = {"kinds": seeds[0]["kinds"], "seeds": seeds,
                      "grouped": sum(x["grouped"] for x in seeds) > len(seeds) / 2}
    if not ran:
        return _judged(cid, st, not_run("no architecture ran s3, parity and dyck"),
                       reason="no architecture ran s3, parity and dyck")
    if not per:
        return _none_counted(cid, st, lists)
    closer = [a for a, d in per.items() if d["grouped"]]

    def kinds(d, t):
        return "/".join(d["kinds"][t]) or "none"

    text = "; ".join(f"{a}: s3 {kinds(d, 's3')}, parity {kinds(d, 'parity')}, dyck {kinds(d, 'dyck')}"
                     + (f" (grouped in {sum(x['grouped'] for x in d['seeds'])} of {len(d['seeds'])} seeds)"
                        if len(d["seeds"]) > 1 else "") for a, d in per.items())
    held = len(closer) > len(per) / 2
    budget = sorted(skipped or {})
    return _judged(cid, st, REPRODUCED if held else contradicted(
                       f"S3 groups with Parity (not Dyck) in {len(closer)} of {len(per)} architectures that learned "
                       "all three"),
                   measured=text + _chance_text(lists) + (f"; not run (budget): {', '.join(budget)}" if budget else ""),
                   archs_grouped=closer, n_archs=len(per), profiles=per, not_run_budget=budget, **lists)


def all_claims(cells, conv_runs=None, pretrained=None, seed_cells=None, skipped=None) -> list[Claim]:
    """Every claim of the study; ``seed_cells`` {(arch, task): [cells of further seeds]} (profile claims);
    ``skipped`` {"arch/task": "budget"}: cells the preset left untrained (``StatePreset.not_run_budget``)."""
    from dlmlab.report.seeds import with_seeds
    from dlmlab.studies.state.seeds import SEED_REFS

    sk = dict(skipped or {})
    return with_seeds([late_in_recurrent(cells, seed_cells, sk), gradual_in_transformer(cells, seed_cells, sk),
                       dyck_inversion(cells, seed_cells, sk), s3_with_parity(cells, seed_cells, sk),
                       direction_ablation(cells), conv1d(conv_runs or {}, skipped=sk),
                       readability_causality(pretrained or [], cells)], SEED_REFS)


_BY_LEN = ("acc_by_len", "acc_per_seq", "chance", "above_chance_by_len")


def int_lengths(cell: dict) -> dict:
    """``cell`` with its evaluation lengths (dict keys, strings after JSON) as ints again (in place)."""
    for name in _BY_LEN:
        if name in cell:
            cell[name] = {int(k): v for k, v in cell[name].items()}
    if "control_ood" in cell:
        cell["control_ood"] = {k: ({int(L): v for L, v in x.items()} if isinstance(x, dict) else x)
                               for k, x in cell["control_ood"].items()}
    if "ablation" in cell:
        cell["ablation"] = {kind: {int(k): v for k, v in by_len.items()} for kind, by_len in cell["ablation"].items()}
    return cell


def claims_from_results(data: dict) -> list[Claim]:
    """The claims re-judged from a state ``results.json`` (``data``: the parsed file, this version's or an older
    one's), with this version's definitions: cells, Conv1D runs, further seeds and pretrained results are read
    from ``data["results"]``."""
    import copy

    res = copy.deepcopy(data["results"])
    cells = {(c["arch"], c["task"]): int_lengths(c) for c in res["cells"]}
    runs = {(c["arch"], c["task"], c["seed"]): int_lengths(c) for c in res.get("conv_runs", []) + res.get("seed_runs", [])}
    conv = {k: c for k, c in runs.items() if k[0] in ("mamba", "mamba-noconv")}
    conv.update({("mamba", t, 0): c for (a, t), c in cells.items() if a == "mamba" and ("mamba-noconv", t, 0) in conv})
    seed_cells: dict = {}
    for (a, t, s), c in sorted(runs.items()):
        if a != "mamba-noconv" and "probes" in c and (a, t) in cells:
            seed_cells.setdefault((a, t), []).append(c)
    skipped = {k: "budget" for k in res.get("not_run_budget", [])}
    return all_claims(cells, conv, res.get("pretrained", []), seed_cells, skipped=skipped)

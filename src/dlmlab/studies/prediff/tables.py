"""The PreDiff report's tables: main results, paired comparisons (every interval with its n), steps to the
threshold (censored runs as ">= budget"), samples, human preference."""

from __future__ import annotations

import math

from dlmlab.report import Table
from dlmlab.studies.prediff.paired import fmt_interval
from dlmlab.studies.prediff.preference import preference_table
from dlmlab.studies.prediff.threshold import fmt_steps


def _f(x, d=2):
    return None if x is None else round(float(x), d)


def _interval(m: dict) -> str | None:
    lo_hi = m.get("val_ppl_interval")
    if not lo_hi:
        return None
    n = m.get("val_interval_n")
    return f"[{_f(lo_hi[0])}, {_f(lo_hi[1])}]" + ("" if n is None else f" (n={n} {m.get('val_interval_unit', 'seeds')})")


def tables(res: dict, p) -> list[Table]:
    first, last = p.sample_steps[0], p.sample_steps[-1]
    main = Table(
        "Main results: held-out perplexity after the same adaptation budget, and samples",
        ["method", "init", "attention", "objective", "PPL", "95% interval", "PPL kind", "study-code weighting",
         "MAUVE", "Rep-4", "Self-BLEU", f"tokens/s ({first} steps)", f"tokens/s ({last} steps)", "gen PPL"],
        [], note=f"PPL: mean over seeds {res.get('seeds')} of the held-out NLL, as a perplexity; the interval is the "
                 f"Student-t 95% interval over the seed means (n seeds).  Study-code weighting: 1/(1-t)-weighted masked CE "
                 f"(not a bound).  MAUVE, Rep-4, Self-BLEU and gen PPL (under the {res.get('gen_ppl_judge')}) of "
                 f"the first seed's samples at {last} denoising steps; the AR control decodes token by token.")
    for n, m in res["methods"].items():
        s_last = res["samples"].get(f"{n}@{last}") or res["samples"].get(n, {})
        sp_first = res["speed"].get(f"{n}@{first}") or res["speed"].get(n, {})
        sp_last = res["speed"].get(f"{n}@{last}") or res["speed"].get(n, {})
        main.rows.append([n, m["init"], m["attention"], m["objective"], _f(m["val_ppl"]), _interval(m),
                          "ELBO bound" if m["bound"] else "exact", _f(m.get("original_weighting_ppl")),
                          _f(s_last.get("mauve"), 3), _f(s_last.get("rep4"), 3), _f(s_last.get("self_bleu")),
                          _f(sp_first.get("tokens_per_s"), 1), _f(sp_last.get("tokens_per_s"), 1), _f(s_last.get("gen_ppl"))])
    comp = Table("Paired comparisons (A minus B; lower is better for A)",
                 ["comparison", "A", "B", "mean difference", "95% interval", "per seed", "A better beyond the interval"],
                 [], note="Held-out NLL in nats per target token (steps for the threshold comparison: censored runs "
                          "counted at the budget in the mean and per seed, the interval bounds the difference from "
                          "both sides); the same windows, mask rates and masks for both methods; Student-t 95% "
                          "interval over the seed means, n beside it.")
    for k, c in res.get("comparisons", {}).items():
        comp.rows.append([k, c["a"], c["b"], _f(c["mean"], 4), fmt_interval(c),
                          ", ".join(str(_f(x, 4)) for x in c["per_seed"]), c["holds"]])
    ar_speed = res["speed"].get("ar_control", {}).get("tokens_per_s")
    samp = Table("Samples: quality, diversity and speed",
                 ["method", "gen PPL", "Rep-4", "Self-BLEU", "MAUVE", "tokens/s", "speed vs AR", "prompt KV reused"], [])
    ref = res.get("reference", {})
    samp.rows.append(["held-out text", _f(ref.get("gen_ppl")), _f(ref.get("rep4"), 3), _f(ref.get("self_bleu")),
                      None, None, None, None])
    for key, s in res["samples"].items():
        sp = res["speed"].get(key, {})
        tps = sp.get("tokens_per_s")
        samp.rows.append([key, _f(s["gen_ppl"]), _f(s["rep4"], 3), _f(s["self_bleu"]), _f(s["mauve"], 3), _f(tps, 1),
                          None if tps is None or not ar_speed else _f(tps / ar_speed), sp.get("prompt_kv_reused")])
    pref = res.get("human_preference")
    thr = [threshold_table(res["threshold"])] if res.get("threshold") else []
    return [main, comp, *thr, samp] + ([preference_table(pref)] if pref else [])


def threshold_table(thr: dict) -> Table:
    """Per method: its plateau and the steps each seed needed to reach the threshold (``>= budget``: never)."""
    t = Table(f"Steps to the threshold (held-out PPL {thr['ppl']:.2f}: {thr['fraction']:.0%} of the way from the "
              f"from-scratch plateau to the AR-initialised one)", ["method", "plateau PPL", "steps per seed", "reached"],
              [], note=f"Plateau: mean held-out NLL over the last {thr['plateau_share']:.0%} of the budget's curve "
                       f"points and the seeds; a run that never reaches the threshold within the {thr['budget']}-step "
                       f"budget is censored (>= {thr['budget']}).")
    for n, steps in thr["steps"].items():
        t.rows.append([n, _f(math.exp(thr["plateaus"][n])), fmt_steps(steps, thr["budget"]), thr["reached"][n]])
    return t

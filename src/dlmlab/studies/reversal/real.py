"""Real relation data: fictitious person -> description facts (Berglund et al. reversal-curse files),
or (``dataset="celebrity"``) celebrity child -> parent pairs.

Forward-only training on ``p2d_prompts_train`` (the name comes first, 30 paraphrases per person),
with a byte-level BPE tokenizer trained locally on those training texts.  Evaluation by ranking
candidates with the model's likelihood:

* forward (held-out templates, ``p2d_prompts_test``): the person's description among the descriptions
  of all ``n_facts`` people, written in the same template;
* reverse (``p2d_reverse_prompts_test``): the description comes first and the name must follow; the
  true name among the ``n_facts`` names;
* forward on the training templates (``p2d_prompts_train``, the documents trained on): did the model learn the
  facts (the claim's precondition).

Summed log-likelihood favours short completions: in the held-out templates one person's description is the
shortest every time, so a ranker that always picks it scores 1 / ``n_facts`` whatever it learned (issue 34).  The
claim therefore reads the **per-token** score (mean log p over the completion's tokens) for every accuracy it
judges, reports the number of distinct winners beside it, and takes "learned the facts" from the training
templates; the summed-score accuracies stay in the table as evidence.

ARM score = log p(completion | prompt) (teacher forcing); MDM score = sum of log p at the completion
positions when all of them are masked at once (one-step masked likelihood).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import torch

from dlmlab.config import ConfigError
from dlmlab.models import Transformer
from dlmlab.objectives import ARObjective, MaskedDiffusionObjective
from dlmlab.objectives.mdlm import log_probs_no_mask
from dlmlab.report import Table, claim
from dlmlab.report.claims import (combine, interval_verdict, learned_level, not_run, precondition_failed,
                                  underpowered)
from dlmlab.report.intervals import mean_ci, paired_diff_ci
from dlmlab.studies.parallel import map_jobs
from dlmlab.studies.reversal.claims import cited
from dlmlab.studies.reversal.presets import RealDataPreset
from dlmlab.studies.reversal.synthetic import resolve_device
from dlmlab.studies.threads import threads_for
from dlmlab.tasks.relations import (TextFacts, celebrity_facts, encode_facts, load_celebrity_pairs,
                                    load_person_description, train_relation_tokenizer)
from dlmlab.training import train

N_TRAIN_PER_FACT, N_TEST_PER_FACT = 30, 10
MIN_SEEDS = 3  # the real-data claim compares MDM and ARM over at least this many seeds


@dataclasses.dataclass
class RealTask:
    tokenizer: object
    train: torch.Tensor  # [n_docs, L] forward documents (right-padded)
    pad_id: int
    mask_id: int
    vocab_size: int
    forward_test: list[tuple[str, list[str], int]]  # (prompt, candidates, index of the true one)
    reverse_test: list[tuple[str, list[str], int]]
    forward_train: list[tuple[str, list[str], int]] = dataclasses.field(default_factory=list)  # training templates


def _blocks(facts: TextFacts, per: int, n: int) -> list[list[tuple[str, str]]]:
    if len(facts) < per * n:
        raise ValueError(f"expected {per} rows per person for {n} people, found {len(facts)} rows")
    return [[(facts.prompts[f * per + t], facts.completions[f * per + t]) for t in range(per)] for f in range(n)]


def _ranking(blocks: list[list[tuple[str, str]]]) -> list[tuple[str, list[str], int]]:
    """Rank, for person f and template t, the completion of every person written with template t."""
    out = []
    for f, rows in enumerate(blocks):
        for t, (prompt, _) in enumerate(rows):
            out.append((prompt, [blocks[g][t][1] for g in range(len(blocks))], f))
    return out


def celebrity_items(n: int):
    """The first ``n`` celebrity pairs whose child and parent are both unique among them: training
    documents "C's mother is P", forward items (the same prompts, the true parent among the n parents)
    and reverse items ("P's child is" -> the true child among the n children)."""
    seen_c, seen_p, pairs = set(), set(), []
    for p in load_celebrity_pairs():
        if p.child not in seen_c and p.parent not in seen_p:
            pairs.append(p)
            seen_c.add(p.child)
            seen_p.add(p.parent)
        if len(pairs) == n:
            break
    if len(pairs) < n:
        raise ValueError(f"only {len(pairs)} celebrity pairs with unique child and parent, asked for {n}")
    fwd, rev = celebrity_facts(pairs)
    f_items = [(fwd.prompts[i], list(fwd.completions), i) for i in range(n)]
    r_items = [(rev.prompts[i], list(rev.completions), i) for i in range(n)]
    return fwd, f_items, r_items


def _spread(items: list, k: int) -> list:
    """``k`` items evenly spaced over ``items`` (all of them when there are at most ``k``)."""
    if len(items) <= k:
        return items
    return [items[i] for i in np.linspace(0, len(items) - 1, k).round().astype(int)]


def prepare(cfg: RealDataPreset, tokenizer=None, pad_id: int | None = None, mask_id: int | None = None) -> RealTask:
    """Forward training documents and ranking items for the first ``cfg.n_facts`` people.

    Without ``tokenizer`` a BPE is trained on the training texts and pad / mask get the two ids after
    its vocabulary; with one (anything with ``encode(text) -> ids`` and ``vocab_size``), give both ids.
    """
    n = cfg.n_facts
    if cfg.dataset == "celebrity":
        train_docs, fwd, rev = celebrity_items(n)
        fwd_train = fwd  # the forward prompts are the training documents
    else:
        train_f = load_person_description("p2d_prompts_train")
        train_docs = TextFacts(train_f.prompts[: n * N_TRAIN_PER_FACT], train_f.completions[: n * N_TRAIN_PER_FACT])
        fwd_train = _ranking(_blocks(train_docs, N_TRAIN_PER_FACT, n))
        fwd = _ranking(_blocks(load_person_description("p2d_prompts_test"), N_TEST_PER_FACT, n))
        rev = _ranking(_blocks(load_person_description("p2d_reverse_prompts_test"), N_TEST_PER_FACT, n))
    if tokenizer is None:
        tok = train_relation_tokenizer(train_docs.texts(), cfg.bpe_vocab)
        pad, mask = tok.vocab_size, tok.vocab_size + 1
    else:
        if pad_id is None or mask_id is None:
            raise ValueError("a given tokenizer needs pad_id and mask_id")
        tok, pad, mask = tokenizer, pad_id, mask_id
    if cfg.rank_items:
        fwd, rev, fwd_train = (_spread(x, cfg.rank_items) for x in (fwd, rev, fwd_train))
    tokens, _ = encode_facts(tok, train_docs, cfg.seq_len, pad)
    tokens = tokens[:, : int((tokens != pad).sum(1).max())]  # train on the shortest padding that fits
    return RealTask(tok, tokens, pad, mask, max(tok.vocab_size, pad + 1, mask + 1), fwd, rev, fwd_train)


def objective_of(task: RealTask, kind: str):
    """ARM: next-token NLL of right-padded documents (pad targets ignored); MDM: MDLM with pads never masked."""
    if kind == "arm":
        return ARObjective(pad_id=task.pad_id)
    return MaskedDiffusionObjective(task.mask_id, pad_id=task.pad_id)


@torch.no_grad()
def score_candidates(model, task: RealTask, kind: str, items, seq_len: int, chunk: int = 512,
                     per_token: bool = False) -> np.ndarray:
    """Per item, the model's log-likelihood of each candidate completion -> [n_items, n_candidates]
    (``per_token``: divided by the completion's token count, which removes the length bias of summed scores)."""
    sums, counts = candidate_loglik(model, task, kind, items, seq_len, chunk)
    return sums / np.maximum(counts, 1) if per_token else sums


@torch.no_grad()
def candidate_loglik(model, task: RealTask, kind: str, items, seq_len: int, chunk: int = 512):
    """(summed log-likelihood, token count) of each candidate completion, both [n_items, n_candidates].

    Scored at the training width (``task.train``'s) when the item fits: a bidirectional model attends to
    the pads too and never saw more of them than that width leaves."""
    rows, comp, shape = [], [], (len(items), len(items[0][1]))
    for prompt, cands, _ in items:
        t, c = encode_facts(task.tokenizer, TextFacts([prompt] * len(cands), cands), seq_len, task.pad_id)
        rows.append(t)
        comp.append(c)
    toks, comp = torch.cat(rows), torch.cat(comp)
    width = max(task.train.shape[1], int((toks != task.pad_id).sum(1).max()))
    toks, comp = toks[:, :width], comp[:, :width]
    scores, counts = [], []
    model.eval()
    dev = next(model.parameters()).device
    for x, c in zip(toks.split(chunk), comp.split(chunk)):
        x, c = x.to(dev), c.to(dev)
        if kind == "arm":
            lp = model(x[:, :-1]).float().log_softmax(-1)
            tok_lp = lp.gather(-1, x[:, 1:, None]).squeeze(-1) * c[:, 1:]
        else:
            noisy = torch.where(c, torch.full_like(x, task.mask_id), x)
            lp = log_probs_no_mask(model(noisy).float(), task.mask_id)
            tok_lp = lp.gather(-1, x[..., None]).squeeze(-1) * c
        scores.append(tok_lp.sum(1).cpu())
        counts.append(c.sum(1).cpu())
    return torch.cat(scores).view(shape).numpy(), torch.cat(counts).view(shape).numpy()


def distinct_argmax(scores: np.ndarray) -> int:
    """How many different candidates win across items (1 = the score ignores the prompt, e.g. length bias)."""
    return int(len(np.unique(scores.argmax(1))))


def accuracy(scores: np.ndarray, items) -> float:
    truth = np.array([it[2] for it in items])
    return float((scores.argmax(1) == truth).mean())


def fit_and_rank(model, task: RealTask, kind: str, train_cfg, seq_len: int, seed: int, progress: bool,
                 desc: str = "real", out_dir=None) -> dict:
    """Train ``model`` (any module mapping tokens [B,T] -> logits [B,T,V]) forward-only on ``task.train``
    with the ARM (next token, pads ignored) or MDM (MDLM, pads never masked) objective, then rank
    completions.  Returns {final_loss} and, for ``forward`` (held-out templates), ``reverse`` and ``forward_train``
    (training templates; when the task has them): ``*_acc`` (summed score), ``*_acc_per_token`` and
    ``*_distinct_argmax`` (of the summed score) and ``*_distinct_argmax_per_token``."""
    docs = task.train
    B = train_cfg.batch_size

    def batches(step, gen):
        return docs[torch.randint(0, len(docs), (B,), generator=gen)]

    tcfg = dataclasses.replace(train_cfg, seed=seed, progress=progress)
    hist = train(model, tcfg, batches, objective_of(task, kind), out_dir=out_dir, desc=desc)
    out = {"final_loss": hist[-1]["loss"] if hist else None}
    for name, items in (("forward", task.forward_test), ("reverse", task.reverse_test),
                        ("forward_train", task.forward_train)):
        if not items:
            continue
        s, n = candidate_loglik(model, task, kind, items, seq_len)
        per_token = s / np.maximum(n, 1)
        out[f"{name}_acc"] = accuracy(s, items)
        out[f"{name}_distinct_argmax"] = distinct_argmax(s)
        out[f"{name}_acc_per_token"] = accuracy(per_token, items)
        out[f"{name}_distinct_argmax_per_token"] = distinct_argmax(per_token)
    return out


def train_real(cfg: RealDataPreset, task: RealTask, kind: str, positions: str, seed: int, progress: bool,
               device: str = "auto") -> dict:
    """A toolkit Transformer (MDM: bidirectional, ARM: causal) trained and ranked by :func:`fit_and_rank`."""
    mcfg = dataclasses.replace(cfg.model, vocab_size=task.vocab_size, positions=positions, max_seq_len=cfg.seq_len,
                               attn_mask="bidirectional" if kind == "mdm" else "causal")
    torch.manual_seed(seed)
    model = Transformer(mcfg).to(resolve_device(device))
    res = fit_and_rank(model, task, kind, cfg.train, cfg.seq_len, seed, progress, desc=f"real {kind}/{positions}")
    return {"kind": kind, "positions": positions, "seed": seed, **res}


def real_seeds(seeds: int | Sequence[int]) -> list[int]:
    """The seeds of the real-data runs: a list as given, or ``MIN_SEEDS`` consecutive seeds from an int."""
    out = list(range(seeds, seeds + MIN_SEEDS)) if isinstance(seeds, int) else list(seeds)
    if len(out) < MIN_SEEDS or len(set(out)) != len(out):
        raise ConfigError(f"the real-data claim needs at least {MIN_SEEDS} distinct seeds, got {out}")
    return out


def run_real(cfg: RealDataPreset, seeds: int | Sequence[int], progress: bool = True, device: str = "auto",
             workers: int = 1) -> dict:
    """Train MDM and ARM forward-only on the person->description facts for each PE and seed (see
    :func:`real_seeds`); rank completions.

    The runs are independent and go to ``workers`` processes (see :mod:`dlmlab.studies.parallel`).
    """
    cfg.validate()
    seeds = real_seeds(seeds)
    task = prepare(cfg)
    jobs = [(cfg, task, kind, pe, seed, progress, device) for seed in seeds for pe in cfg.positions
            for kind in ("mdm", "arm")]
    runs = map_jobs(train_real, jobs, workers, desc="real-data runs", progress=progress,
                    threads=threads_for(cfg.model.d_model))
    return {"runs": runs, "seeds": seeds, "chance": 1.0 / cfg.n_facts, "n_facts": cfg.n_facts,
            "dataset": cfg.dataset, "n_train_docs": int(task.train.shape[0]),
            "tokenizer_vocab": task.tokenizer.vocab_size}


def _per_seed(real: dict, kind: str, pe: str, key: str) -> list[float]:
    """``key`` of the (kind, pe) runs, in the order of ``real["seeds"]`` (so MDM and ARM pair by seed)."""
    by = {(r["kind"], r["positions"], r["seed"]): r for r in real["runs"]}
    return [by[(kind, pe, s)][key] for s in real["seeds"]]


def real_table(real: dict) -> Table:
    pes = list(dict.fromkeys(r["positions"] for r in real["runs"]))
    ci = lambda kind, pe, key: mean_ci(_per_seed(real, kind, pe, key), bounds=(0, 1)).fmt()  # noqa: E731 (accuracies)
    mean = lambda kind, pe, key: float(np.mean(_per_seed(real, kind, pe, key)))  # noqa: E731
    rows = [[kind.upper(), pe, ci(kind, pe, "forward_train_acc_per_token"), ci(kind, pe, "forward_acc"),
             ci(kind, pe, "reverse_acc"), ci(kind, pe, "forward_acc_per_token"), ci(kind, pe, "reverse_acc_per_token"),
             f"{mean(kind, pe, 'forward_distinct_argmax'):.1f}/{mean(kind, pe, 'reverse_distinct_argmax'):.1f}",
             mean(kind, pe, "final_loss")] for pe in pes for kind in ("mdm", "arm")]
    person = real.get("dataset", "person_description") == "person_description"
    return Table(f"Real data: {'person -> description' if person else 'celebrity child -> parent'} facts "
                 "(forward-only), ranking accuracy",
                 ["model", "positions", "forward acc, training templates (per-token score)",
                  "forward acc" + (" (held-out templates)" if person else ""),
                  "reverse acc" + (" (description -> name)" if person else " (parent -> child)"),
                  "forward acc (per-token score)", "reverse acc (per-token score)", "distinct winners fwd/rev",
                  "final train loss"],
                 rows,
                 note=f"{real['n_facts']} {'people' if person else 'pairs'}, {real['n_train_docs']} training "
                      f"documents, local BPE of {real['tokenizer_vocab']} tokens; chance = {real['chance']:.3f}. "
                      f"Mean [95% Student-t interval] over {len(real['seeds'])} seeds; loss and distinct winners "
                      f"are means. Accuracy columns rank by the summed log-likelihood of the completion; "
                      f"'per-token score' by its mean per token; 'distinct winners' counts the candidates that win "
                      f"on some item (1 means the ranking ignores the prompt, e.g. a length bias). The claim reads "
                      f"the training-template column (learned the facts?) and the per-token reverse column.")


LEARNED_KEY = "forward_train_acc_per_token"  # "learned the facts": the training templates, per-token score
COMPARED_KEY = "reverse_acc_per_token"  # the compared reverse accuracy: per-token score (cannot reward length)


def _learned(real: dict, kind: str, pe: str):
    """``None`` when every seed's ``kind`` model learned the forward facts (per-token forward accuracy on the
    training templates, ``LEARNED_KEY``, at :func:`~dlmlab.report.claims.learned_level` of chance), else a
    precondition verdict naming the worst seed and its number of distinct winners."""
    acc = _per_seed(real, kind, pe, LEARNED_KEY)
    need = learned_level(real["chance"])
    if min(acc) >= need:
        return None
    worst = int(np.argmin(acc))
    wins = _per_seed(real, kind, pe, "forward_train_distinct_argmax_per_token")[worst]
    return precondition_failed(f"real {kind}/{pe} forward accuracy on the training templates (per-token score) "
                               f"{min(acc):.3f} (worst of {len(acc)} seeds; {wins} distinct winners of "
                               f"{real.get('n_facts', '?')}) < learned level {need:.3f} (chance {real['chance']:.3g})")


def real_claim(real: dict):
    """MDM minus ARM reverse accuracy (per-token score, ``COMPARED_KEY``), paired by seed, per PE: holds when every
    PE's 95% t-interval is above 0.

    Verdict: fewer than ``MIN_SEEDS`` seeds -> inconclusive / underpowered; a PE whose MDM or ARM did not learn the
    forward facts on some seed (``LEARNED_KEY``) -> inconclusive / precondition for that PE (whatever its interval); else each PE's
    interval decides its part (above 0: reproduced; below 0: contradicted; reaching 0: underpowered) and the
    parts are combined."""
    pes = list(dict.fromkeys(r["positions"] for r in real["runs"]))
    ev: dict = {"seeds": real["seeds"], "chance": real["chance"]}
    if not pes:
        return cited([claim("real_mdm_beats_arm_reverse", "needs real-data runs", None,
                            judgement=not_run("no real-data run was made"), **ev)])[0]
    enough = len(real["seeds"]) >= MIN_SEEDS
    parts = []
    for pe in pes:
        mdm, arm = _per_seed(real, "mdm", pe, COMPARED_KEY), _per_seed(real, "arm", pe, COMPARED_KEY)
        d = paired_diff_ci(mdm, arm)
        pre = _learned(real, "mdm", pe) or _learned(real, "arm", pe)
        parts.append(pre or interval_verdict(d, what=f"{pe} MDM - ARM reverse accuracy (per-token score)"))
        ev |= {f"mdm_reverse_acc_per_token_{pe}": mdm, f"arm_reverse_acc_per_token_{pe}": arm,
               f"mdm_minus_arm_{pe}": d.mean, f"mdm_minus_arm_{pe}_ci95": [d.lo, d.hi], f"mdm_minus_arm_{pe}_n": d.n}
        for k in ("mdm", "arm"):  # the gate, the held-out forward ranking and the summed-score numbers: evidence
            for key in (LEARNED_KEY, "forward_train_distinct_argmax_per_token", "forward_acc_per_token",
                        "reverse_distinct_argmax_per_token", "forward_acc", "reverse_acc", "reverse_distinct_argmax"):
                if all(key in r for r in real["runs"]):
                    ev[f"{k}_{key}_{pe}"] = _per_seed(real, k, pe, key)
    judgement = (underpowered(f"{len(real['seeds'])} seeds, fewer than the {MIN_SEEDS} the claim needs")
                 if not enough else combine(parts))
    return cited([_real_claim(judgement, real, ev)])[0]


def _real_claim(judgement, real: dict, ev: dict):
    return claim("real_mdm_beats_arm_reverse",
                 "On the real person->description facts, trained forward-only until both models learned the forward "
                 "facts (per-token ranking of the training templates at the learned level), the MDM ranks the true "
                 "name higher than the ARM on reverse (description -> name) prompts: the MDM-minus-ARM reverse "
                 f"accuracy (per-token score), paired by seed over >= {MIN_SEEDS} seeds, has a 95% Student-t "
                 "interval above 0 for every positional encoding.", judgement.verdict == "reproduced",
                 judgement=judgement, learned_level=learned_level(real["chance"]),
                 rule="per-seed values and interval are reported; a difference within float noise (an interval "
                      "that reaches 0) does not hold, so machines whose kernels round differently agree", **ev)

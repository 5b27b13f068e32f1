"""What a zoo model shows, measured the same way at export and in the tests (deterministic inputs, seed 0).

Each function takes a :class:`~dlmlab.rundir.load.Loaded` and the entry's ``eval`` dict and returns
``{name: float}``:

* :func:`induction`: on ``n_seq`` repeated random sequences [n_seq, seq_len] (ids in ``[lo, hi)``): the best
  layer-0 previous- and next-token head scores (attention from i to i -+ 1, 1 = perfect), the best induction
  head score in layers >= 1 (AR: TransformerLens's score, attention from q to q - half + 1; masked diffusion:
  attention from a masked target to its source), and forward induction accuracy (AR: next-token prediction in
  the second half; masked diffusion: masked targets in the second half, both neighbours visible);
* :func:`text_lm`: the same head scores and accuracy on repeated random characters, plus the per-token NLL
  (AR, exact) or NELBO (masked diffusion, 8 antithetic Monte-Carlo draws, seed 0) on the first ``n_val``
  validation windows of the training corpus.
"""

from __future__ import annotations

import torch

from dlmlab.analysis.heads import next_token_scores, previous_token_scores
from dlmlab.analysis.induction import (ar_accuracy, ar_induction_scores, dlm_accuracy, dlm_induction_scores)
from dlmlab.tasks.repeated import repeated_tokens


def _repeats(run, ev: dict) -> torch.Tensor:
    """[n_seq, seq_len] repeated random sequences, deterministic (seed ``ev.get("seed", 0)``); ids in
    ``[ev["lo"], ev["hi"])``, ``hi`` defaulting to the tokenizer's vocabulary size."""
    gen = torch.Generator().manual_seed(int(ev.get("seed", 0)))
    hi = ev.get("hi") or run.tokenizer.vocab_size
    return repeated_tokens(int(ev["n_seq"]), int(ev["seq_len"]) // 2, int(ev.get("lo", 0)), int(hi), gen)


@torch.no_grad()
def induction(run, ev: dict) -> dict[str, float]:
    """Head scores and forward induction accuracy (see the module docstring)."""
    model, tokens = run.model, _repeats(run, ev)
    prev, nxt = previous_token_scores(model, tokens), next_token_scores(model, tokens)
    if run.mask_id is None:  # autoregressive
        acc = ar_accuracy(model, tokens, "forward")
        ind = ar_induction_scores(model, tokens)
    else:
        acc = dlm_accuracy(model, tokens, run.mask_id, "forward", "both", per_seq=8, seed=0)
        ind = dlm_induction_scores(model, tokens, run.mask_id, "forward", per_seq=4, seed=0)
    out = {"prev_token_head_layer0": float(prev[0].max()), "next_token_head_layer0": float(nxt[0].max()),
           "forward_induction_accuracy": float(acc)}
    if ind.shape[0] > 1:
        out["induction_head_score"] = float(ind[1:].max())
    return out


@torch.no_grad()
def text_lm(run, ev: dict) -> dict[str, float]:
    """:func:`induction` plus the validation NLL / NELBO per token (nats)."""
    from dlmlab.data.lm import DataConfig, TokenStream, load_corpus
    from dlmlab.objectives.mdlm import elbo_bound

    out = induction(run, ev)
    stream, _ = load_corpus(DataConfig(source=ev["source"], tokenizer="char", seq_len=int(ev["text_len"])),
                            tokenizer=run.tokenizer)
    val = TokenStream.chunks(stream.val, int(ev["text_len"]), limit=int(ev["n_val"]))
    if run.mask_id is None:
        logits = run.model(val[:, :-1])
        nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1).double(), val[:, 1:].flatten())
        out["val_nll"] = float(nll)
    else:
        out["val_nelbo"] = elbo_bound(run.model, val, run.mask_id, n_samples=8, seed=0, schedule=run.noise)
    return out

"""The study's three signatures on multi-token relation facts (the large-scale part), for any toolkit LM.

A fact is "A ... B" in its forward (training) document and "B ... A" in its reverse query; A is the
name (person -> description) or the child (celebrity child -> parent pairs), B the description or the
parent.  Per fact both documents are tokenised piecewise so that the A tokens and the B tokens are
known (:class:`SpanDocs`: ``tokens`` [N, T], boolean ``a`` / ``b`` [N, T]).

1. **Attention-score correlation** (MDM only): with the A tokens masked in both documents, the
   pre-softmax score from the A positions to the B positions (``attention_scores``, averaged over
   those query-key pairs) per layer and head, forward vs reverse; Pearson correlation across facts per
   head and pooled over heads (each head's mean removed), as in
   :func:`dlmlab.studies.reversal.attention_correlation.score_correlation`.  Control: the same with the reverse
   documents paired to another fact (rolled by one).  A causal model cannot attend from A to B in the
   forward document, so it has none.
2. **Gradient alignment on storage parameters**: per fact, the cosine between the autograd gradients of
   the forward loss and of the reverse loss with respect to the effective value / output weights
   ``W_v``, ``W_o`` of every layer (with LoRA: base weight + adapter product, so full fine-tuning and
   LoRA measure the same quantity).  Forward loss: MDM, NLL of the masked A tokens of the forward
   document (the query "[M] is B" -> A that forward training sees); ARM, NLL of the B tokens after A
   (teacher forcing).  Reverse loss: NLL of the A tokens of the reverse query (masked, or teacher
   forced).  Control: forward gradient of fact n against reverse gradient of fact n+1.
3. **Reverse probability** over training: computed by the caller from
   :func:`dlmlab.studies.reversal.real.candidate_loglik` (see ``hf_finetune``).

``lm`` below maps tokens [B, T] to logits [B, T, V] aligned like a toolkit model (MDM: position i scores
token i; ARM: position i predicts token i+1) and exposes ``inner`` (the toolkit Transformer),
``inner_tokens(tokens)`` and ``offset`` (positions the wrapper prepends, e.g. a BOS).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dlmlab.studies.reversal.attention_correlation import pearson
from dlmlab.studies.reversal.gradient_alignment import storage_modules
from dlmlab.studies.reversal.storage_routing import attention_scores
from dlmlab.objectives.mdlm import log_probs_no_mask
from dlmlab.tasks.relations import ParentChild, TextFacts

Piece = tuple[str, str]  # (text, role) with role "a", "b" or ""


@dataclass
class SpanDocs:
    """``tokens`` [N, T] right-padded; ``a`` / ``b`` [N, T] bool: the A / B token positions of each row."""

    tokens: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor


def encode_pieces(tok, docs: list[list[Piece]], pad_id: int) -> SpanDocs:
    """Encode each document piece by piece (``tok.encode`` per piece) so the role of every token is known."""
    rows, roles = [], []
    for pieces in docs:
        ids, r = [], []
        for text, role in pieces:
            t = tok.encode(text)
            ids += t
            r += [role] * len(t)
        rows.append(ids)
        roles.append(r)
    T = max(len(x) for x in rows)
    tokens = torch.full((len(rows), T), pad_id, dtype=torch.long)
    a = torch.zeros(len(rows), T, dtype=torch.bool)
    b = torch.zeros_like(a)
    for i, (ids, r) in enumerate(zip(rows, roles)):
        tokens[i, : len(ids)] = torch.tensor(ids)
        a[i, : len(r)] = torch.tensor([x == "a" for x in r])
        b[i, : len(r)] = torch.tensor([x == "b" for x in r])
    return SpanDocs(tokens, a, b)


def person_pieces(train: TextFacts, reverse: TextFacts, n: int, per_train: int, per_test: int):
    """(forward, reverse) piece lists for the first ``n`` people: the forward document is the first training
    row of the person whose prompt holds " <name>" (the name as the reverse completion writes it, so A
    has the same tokens in both), else the first row; the reverse query is the first reverse test row."""
    fwd, rev = [], []
    for f in range(n):
        r_prompt, r_name = reverse.prompts[f * per_test], reverse.completions[f * per_test]
        name = r_name.strip()
        rows = [(train.prompts[f * per_train + t], train.completions[f * per_train + t]) for t in range(per_train)]
        prompt, comp = next(((p, c) for p, c in rows if " " + name in p), rows[0])
        k = prompt.find(" " + name)
        if k >= 0:
            pieces = [(prompt[:k], ""), (" " + name, "a"), (prompt[k + len(name) + 1:], ""), (comp, "b")]
        else:
            k = prompt.find(name)
            pieces = ([(prompt[:k], ""), (name, "a"), (prompt[k + len(name):], ""), (comp, "b")] if k >= 0
                      else [(prompt, ""), (comp, "b")])
        fwd.append([p for p in pieces if p[0]])
        rev.append([(r_prompt, "b"), (r_name, "a")])
    return fwd, rev


def celebrity_pieces(pairs: list[ParentChild]):
    """(forward, reverse) piece lists: "C's mother is P" (A = C, B = P) and "P's child is C"."""
    fwd = [[(p.child, "a"), (f"'s {p.parent_type} is", ""), (f" {p.parent}", "b")] for p in pairs]
    rev = [[(p.parent, "b"), ("'s child is", ""), (f" {p.child}", "a")] for p in pairs]
    return fwd, rev


def _masked(docs: SpanDocs, mask_id: int) -> torch.Tensor:
    return torch.where(docs.a, torch.full_like(docs.tokens, mask_id), docs.tokens)


def span_nll(lm: nn.Module, tokens: torch.Tensor, span: torch.Tensor, objective: str, mask_id: int) -> torch.Tensor:
    """Per-row summed NLL [N] of the ``span`` tokens: MDM with all of them masked at once, ARM teacher-forced."""
    if objective == "mdm":
        lp = log_probs_no_mask(lm(torch.where(span, torch.full_like(tokens, mask_id), tokens)).float(), mask_id)
        return -(lp.gather(-1, tokens[..., None]).squeeze(-1) * span).sum(1)
    lp = lm(tokens[:, :-1]).float().log_softmax(-1)
    return -(lp.gather(-1, tokens[:, 1:, None]).squeeze(-1) * span[:, 1:]).sum(1)


def _module_grads(lm: nn.Module, modules: dict[str, nn.Module], tokens, span, objective, mask_id):
    """Per module (input [N,T,in], output-gradient [N,T,out]) of the summed per-row NLL: row n's own gradient."""
    ins, outs = {}, {}

    def keep(name):
        def hook(mod, args, out):
            if not out.requires_grad:  # nothing upstream trains (e.g. LoRA elsewhere): a leaf loses no path
                out = out.detach().requires_grad_()
            ins[name], outs[name] = args[0], out
            return out
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in modules.items()]
    try:
        with torch.enable_grad():
            loss = span_nll(lm, tokens, span, objective, mask_id).sum()
            gouts = torch.autograd.grad(loss, [outs[n] for n in modules])
    finally:
        for h in handles:
            h.remove()
    return {n: (ins[n].detach().float(), g.float()) for n, g in zip(modules, gouts)}


def storage_gradient_cosines(lm: nn.Module, fwd: SpanDocs, rev: SpanDocs, objective: str, mask_id: int,
                             layers: list[int] | None = None) -> dict:
    """Per-fact cosine [N] of forward- and reverse-loss gradients on the effective ``W_v``, ``W_o`` weights of
    ``layers`` (default all), and the control (reverse gradient of the next fact).  Facts do not interact,
    so one batched pass per document set gives every fact's own gradient (sum over t of g^T x)."""
    model = lm.inner
    layers = list(range(len(model.blocks))) if layers is None else layers
    modules = {k: v for i in layers for k, v in storage_modules(model, i).items()}
    was = model.training
    model.eval()
    span_f = fwd.a if objective == "mdm" else fwd.b
    dev = next(model.parameters()).device
    gf = _module_grads(lm, modules, fwd.tokens.to(dev), span_f.to(dev), objective, mask_id)
    gr = _module_grads(lm, modules, rev.tokens.to(dev), rev.a.to(dev), objective, mask_id)
    if was:
        model.train()
    N = fwd.tokens.shape[0]
    dot = torch.zeros(N, dtype=torch.float64, device=dev)
    ctrl, nf, nr = dot.clone(), dot.clone(), dot.clone()
    for name in modules:
        (xf, of), (xr, orr) = gf[name], gr[name]
        Gf = torch.einsum("nto,nti->noi", of, xf)  # per-fact weight gradient [N, out, in]
        Gr = torch.einsum("nto,nti->noi", orr, xr)
        dot += (Gf * Gr).sum((1, 2), dtype=torch.float64)
        ctrl += (Gf * Gr.roll(1, 0)).sum((1, 2), dtype=torch.float64)
        nf += Gf.pow(2).sum((1, 2), dtype=torch.float64)
        nr += Gr.pow(2).sum((1, 2), dtype=torch.float64)
        del Gf, Gr
    den = (nf * nr).sqrt()
    den_c = (nf * nr.roll(1, 0)).sqrt()
    cos = torch.where(den > 0, dot / den.clamp(min=1e-300), torch.zeros_like(den))
    cos_c = torch.where(den_c > 0, ctrl / den_c.clamp(min=1e-300), torch.zeros_like(den))
    return {"per_fact": cos.cpu(), "control_per_fact": cos_c.cpu()}


def _span_scores(lm: nn.Module, docs: SpanDocs, mask_id: int, layer: int) -> torch.Tensor:
    """Mean pre-softmax score [N, H] from the (masked) A positions to the B positions of ``layer``."""
    model, off = lm.inner, lm.offset
    dev = next(model.parameters()).device
    toks = lm.inner_tokens(_masked(docs, mask_id).to(dev))
    s = attention_scores(model, toks, layer)[:, :, off:, off:]  # [N,H,T,T]
    w = (docs.a[:, :, None] & docs.b[:, None, :]).to(dev, s.dtype)  # [N,T,T]
    return (s.nan_to_num(neginf=0.0) * w[:, None]).sum((-1, -2)) / w.sum((-1, -2))[:, None]


def attention_correlations(lm: nn.Module, fwd: SpanDocs, rev: SpanDocs, mask_id: int) -> dict:
    """Per layer: pooled forward/reverse A->B score correlation across facts (heads' means removed), its mean
    over heads of the per-head correlation, and the control (reverse documents rolled by one fact)."""
    pooled, per_head_mean, control = [], [], []
    with torch.no_grad():
        for layer in range(len(lm.inner.blocks)):
            f, r = _span_scores(lm, fwd, mask_id, layer), _span_scores(lm, rev, mask_id, layer)
            fc, rc = f - f.mean(0), r - r.mean(0)
            pooled.append(float(pearson(fc.flatten(), rc.flatten())))
            control.append(float(pearson(fc.flatten(), rc.roll(1, 0).flatten())))
            ph = pearson(f, r, 0)
            ok = torch.isfinite(ph)
            per_head_mean.append(float(ph[ok].mean()) if ok.any() else float("nan"))
    return {"pooled_per_layer": pooled, "per_head_mean_per_layer": per_head_mean, "control_per_layer": control}

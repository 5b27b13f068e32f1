"""TransformerLens hook names read as dlmlab ones, and a model's tokenizer in TransformerLens's calls.

dlmlab's hook points are TransformerLens's without the ``hook_`` prefix (``blocks.0.attn.hook_pattern``
is ``blocks.0.attn.pattern``), except where the table below says otherwise.  :func:`from_tl_name`
rewrites a TransformerLens name (or glob) into dlmlab's; names without ``hook_`` pass unchanged.
``HookedModule.select_hooks`` (so ``cache``, ``run_with_cache``, ``run_with_hooks``) and
``ActivationCache[...]`` accept either spelling; predicates see dlmlab's names.

=====================================  ==================================
TransformerLens                        dlmlab
=====================================  ==================================
``hook_embed``, ``hook_pos_embed``     ``embed``, ``pos_embed``
``blocks.{i}.hook_resid_pre|mid|post`` ``blocks.{i}.resid_pre|mid|post``
``blocks.{i}.hook_attn_out``           ``blocks.{i}.attn_out`` (= ``mixer_out``)
``blocks.{i}.hook_mlp_out``            ``blocks.{i}.mlp_out``
``blocks.{i}.attn.hook_q|k|v|z``       ``blocks.{i}.attn.q|k|v|z`` (q, k before RoPE)
``blocks.{i}.attn.hook_pattern``       ``blocks.{i}.attn.pattern``
``blocks.{i}.attn.hook_result``        ``blocks.{i}.attn.head_out``
``blocks.{i}.mlp.hook_post``           ``blocks.{i}.mlp.post``
``ln_final.hook_normalized``           ``final``
=====================================  ==================================

:func:`encode_texts`, :func:`str_tokens` and :func:`decode_ids` are what ``model.to_tokens``,
``model.to_str_tokens`` and ``model.to_string`` do with the attached ``model.tokenizer``.
"""

from __future__ import annotations

import re

import torch

from dlmlab.errors import UserError

# TransformerLens names whose dlmlab name is not the name without "hook_"
_RENAMED = {"attn.hook_result": "attn.head_out", "ln_final.hook_normalized": "final"}


def from_tl_name(name: str) -> str:
    """dlmlab's name for a TransformerLens hook name or glob (``blocks.*.attn.hook_pattern`` ->
    ``blocks.*.attn.pattern``); a name without ``hook_`` is returned unchanged."""
    if "hook_" not in name:
        return name
    for tl, ours in _RENAMED.items():
        if name == tl or name.endswith("." + tl):
            return name[: len(name) - len(tl)] + ours
    return re.sub(r"(^|\.)hook_", r"\1", name)


class NoTokenizer(UserError, AttributeError):
    """A text call on a model with no tokenizer attached."""


def tokenizer_of(model, what: str):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise NoTokenizer(f"{what} needs a tokenizer: dlmlab.load attaches the run's (model.tokenizer); "
                          "for a model you built, set model.tokenizer = tokenizer")
    return tok


def _encode(tok, text: str) -> list[int]:
    try:
        ids = tok.encode(text)
    except ValueError as e:
        raise UserError(f"cannot encode {text[:40]!r}: {e}") from None
    return list(getattr(ids, "ids", ids))


def encode_texts(model, text: str | list[str], prepend_bos: bool | None = None) -> torch.Tensor:
    """``model.to_tokens``: a text -> ids [1, T]; a list of texts of one length in tokens -> [B, T].

    No BOS token is prepended (dlmlab's tokenizers have none and its models were trained without one);
    ``prepend_bos=True`` is refused rather than ignored."""
    if prepend_bos:
        raise UserError("to_tokens(prepend_bos=True): dlmlab models are trained without a BOS token, so none is "
                        "prepended (TransformerLens prepends one by default)")
    tok = tokenizer_of(model, "to_tokens")
    texts = [text] if isinstance(text, str) else list(text)
    rows = [_encode(tok, t) for t in texts]
    lengths = sorted({len(r) for r in rows})
    if len(lengths) > 1:
        raise UserError(f"to_tokens got texts of {lengths[0]} to {lengths[-1]} tokens; dlmlab tokenizers have no "
                        "padding token, so give texts of one length or call to_tokens on each")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return torch.tensor(rows, dtype=torch.long, device=device)


def str_tokens(model, tokens) -> list[str] | list[list[str]]:
    """``model.to_str_tokens``: one string per token of a text, a [T] / [B, T] tensor or a list of ids."""
    from dlmlab.interp.activation_cache import to_str_tokens

    return to_str_tokens(tokenizer_of(model, "to_str_tokens"), tokens)


def decode_ids(model, tokens) -> str | list[str]:
    """``model.to_string``: ids [T] (or a list of ids) -> text; [B, T] -> one text per row."""
    tok = tokenizer_of(model, "to_string")
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() > 2:
            raise UserError(f"to_string wants ids of shape [T] or [B, T], got {tuple(tokens.shape)}")
        tokens = tokens.tolist()
    if tokens and isinstance(tokens[0], (list, tuple)):
        return [tok.decode([int(t) for t in row]) for row in tokens]
    return tok.decode([int(t) for t in tokens])

"""TransformerLens hook names read as dlmlab ones, and a model's tokenizer in TransformerLens's calls.

dlmlab's hook points are TransformerLens's without the ``hook_`` prefix (``blocks.0.attn.hook_pattern``
is ``blocks.0.attn.pattern``), except where the table below says otherwise.  :func:`from_tl_name`
rewrites a TransformerLens name (or glob) into dlmlab's; names without ``hook_`` pass unchanged.
``HookedModule.select_hooks`` (so ``cache``, ``run_with_cache``, ``run_with_hooks``) and
``ActivationCache[...]`` accept either spelling.  A predicate is called with both names of a point
(:func:`to_tl_name` gives the TransformerLens one where the point has one) and matches when either
answer is true, so ``lambda n: n.endswith("hook_z")`` and ``lambda n: n.endswith(".z")`` both work.

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
``ln_final.hook_normalized|hook_scale`` ``ln_final.normalized|scale`` (before the weight and bias)
``blocks.{i}.ln1|ln2.hook_normalized`` ``blocks.{i}.ln1|ln2.normalized`` (and ``scale``)
=====================================  ==================================

``final`` is the final norm's output (after its weight and bias) and has no TransformerLens name.


:func:`encode_texts`, :func:`str_tokens` and :func:`decode_ids` are what ``model.to_tokens``,
``model.to_str_tokens`` and ``model.to_string`` do with the attached ``model.tokenizer``.
"""

from __future__ import annotations

import re

import torch

from dlmlab.errors import UserError

from dlmlab.data.tokenizer import MASK_TEXT  # how dlmlab's tokenizers write the mask id

# TransformerLens names whose dlmlab name is not the name without "hook_"
_RENAMED = {"attn.hook_result": "attn.head_out"}
# the dlmlab names that have a TransformerLens name: that name is the dlmlab one with "hook_" before the last part
_TL_POINTS = re.compile(r"^(embed|pos_embed|blocks\.\d+\.(resid_pre|resid_mid|resid_post|attn_out|mlp_out"
                        r"|attn\.(q|k|v|z|pattern)|mlp\.(pre|post)|ln[12]\.(normalized|scale))"
                        r"|ln_final\.(normalized|scale))$")


def from_tl_name(name: str) -> str:
    """dlmlab's name for a TransformerLens hook name or glob (``blocks.*.attn.hook_pattern`` ->
    ``blocks.*.attn.pattern``); a name without ``hook_`` is returned unchanged."""
    if "hook_" not in name:
        return name
    for tl, ours in _RENAMED.items():
        if name == tl or name.endswith("." + tl):
            return name[: len(name) - len(tl)] + ours
    return re.sub(r"(^|\.)hook_", r"\1", name)


def to_tl_name(name: str) -> str | None:
    """TransformerLens's name for a dlmlab hook point (``blocks.0.attn.z`` -> ``blocks.0.attn.hook_z``), or
    None for a point TransformerLens has no name for (``final``, ``logits``, ``mixer_out``, SSM points)."""
    for tl, ours in _RENAMED.items():
        if name.endswith("." + ours) and re.match(r"^blocks\.\d+\.", name):
            return name[: len(name) - len(ours)] + tl
    if not _TL_POINTS.match(name):
        return None
    head, _, last = name.rpartition(".")
    return f"{head}.hook_{last}" if head else f"hook_{last}"


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


def mask_id_of(model, tok) -> int:
    """The mask token's id: ``model.objective.mask_id`` when set, else, for a dlmlab tokenizer, the id one past its
    vocabulary when the model's input vocabulary has that extra id (how a masked-diffusion run adds it)."""
    mask = getattr(getattr(model, "objective", None), "mask_id", None)
    if mask is not None:
        return int(mask)
    n_tok, n_model = getattr(tok, "vocab_size", None), getattr(getattr(model, "cfg", None), "vocab_size", None)
    if isinstance(n_tok, int) and isinstance(n_model, int) and n_model > n_tok:
        return n_tok
    raise UserError(f"the text has the mask token {MASK_TEXT!r}, but this model has no mask id (its input "
                    "vocabulary is its tokenizer's; set model.objective = run.objective for a diffusion run)")


def _encode_with_mask(model, tok, text: str) -> list[int]:
    """``text`` -> ids, with :data:`MASK_TEXT` written as the mask id (dlmlab tokenizers; a Hugging Face
    tokenizer's own mask token is in its vocabulary and encodes as is)."""
    if MASK_TEXT not in text or not type(tok).__module__.startswith("dlmlab."):
        return _encode(tok, text)
    pieces = text.split(MASK_TEXT)
    mask = mask_id_of(model, tok)
    ids = _encode(tok, pieces[0]) if pieces[0] else []
    for piece in pieces[1:]:
        ids.append(mask)
        ids += _encode(tok, piece) if piece else []
    return ids


def single_token(model, text: str) -> int:
    """``model.to_single_token``: the id of ``text`` when it encodes to exactly one token."""
    ids = _encode_with_mask(model, tokenizer_of(model, "to_single_token"), text)
    if len(ids) != 1:
        raise UserError(f"to_single_token({text!r}): it is {len(ids)} tokens, not one")
    return ids[0]


def encode_texts(model, text: str | list[str], prepend_bos: bool | None = None) -> torch.Tensor:
    """``model.to_tokens``: a text -> ids [1, T]; a list of texts of one length in tokens -> [B, T].

    No BOS token is prepended (dlmlab's tokenizers have none and its models were trained without one);
    ``prepend_bos=True`` is refused rather than ignored."""
    if prepend_bos:
        raise UserError("to_tokens(prepend_bos=True): dlmlab models are trained without a BOS token, so none is "
                        "prepended (TransformerLens prepends one by default)")
    tok = tokenizer_of(model, "to_tokens")
    texts = [text] if isinstance(text, str) else list(text)
    rows = [_encode_with_mask(model, tok, t) for t in texts]
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

"""Input checks shared by every sequence model (and by anything that takes token ids or positions).

:class:`ModelInputError` is a :class:`~dlmlab.errors.UserError` (the CLI prints it as one line)
and a ``ValueError`` (callers that caught ``ValueError`` keep working).
"""

from __future__ import annotations

import torch

from dlmlab.errors import UserError


class ModelInputError(UserError, ValueError):
    """Input a model cannot take: bad token ids, a keyword its family does not support."""


def check_range(values: torch.Tensor, high: int, what: str = "token id", where: str = "for this model") -> None:
    """Raise :class:`ModelInputError` unless every entry of the integer tensor ``values`` is in [0, high).

    The message names the first offending value: "token id 23 out of range [0, 23) for this model".
    """
    if values.numel():
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi >= high:
            bad = lo if lo < 0 else hi
            raise ModelInputError(f"{what} {bad} out of range [0, {high}){' ' + where if where else ''}")


def check_tokens(tokens: torch.Tensor, vocab_size: int, where: str = "for this model") -> None:
    """Raise :class:`ModelInputError` naming the problem unless ``tokens`` is [B,T] ints in [0, vocab_size)."""
    if not isinstance(tokens, torch.Tensor):
        raise ModelInputError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise ModelInputError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if tokens.dim() != 2:
        raise ModelInputError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
    check_range(tokens, vocab_size, "token id", where)


def check_causal_keywords(model_name: str, attn_mask=None, kv_cache=None) -> None:
    """For a causal model without attention: accept ``attn_mask`` None / "causal" and no ``kv_cache``.

    Raises :class:`ModelInputError` ("attn_mask='bidirectional' needs an attention model; a Mamba is
    causal ...") otherwise.  ``model_name`` names the model in the message ("Mamba", "LSTM").
    """
    if attn_mask is not None and not (isinstance(attn_mask, str) and attn_mask == "causal"):
        shown = "a mask tensor" if isinstance(attn_mask, torch.Tensor) else repr(attn_mask)
        raise ModelInputError(f"attn_mask={shown} needs an attention model; a {model_name} is causal "
                              f"(pass attn_mask=None or 'causal')")
    if kv_cache is not None:
        raise ModelInputError(f"kv_cache needs an attention model; a {model_name} has no keys / values to cache")

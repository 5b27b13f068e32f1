"""Load a Dream checkpoint (local folder) into a bidirectional dlmlab :class:`Transformer`.

Dream (``model_type`` "Dream", ``DreamModel``) is a masked-diffusion model initialised from Qwen2.5
and stored in Qwen2's layout and names (``model.embed_tokens``, ``model.layers.i.self_attn.q_proj``
with q/k/v biases, GQA, RoPE ``rope_theta``, RMSNorm, SwiGLU, ``lm_head``), so the weights map as
in :mod:`dlmlab.models.hf_llama`; the attention is bidirectional (no causal mask).

Two conventions differ from the masked-diffusion models trained by this toolkit:

* **shifted logits**: Dream keeps the autoregressive head alignment, so the logits at position
  ``i - 1`` predict the token at ``i`` (position 0's prediction is taken from position 0 itself).
  :func:`align_logits` turns the model output into per-position predictions;
* the **mask token** is ``mask_token_id`` from config.json or generation_config.json (151666 in
  the published models).

No code from the folder runs; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dlmlab.models.hf_files import mask_token_id, read_config
from dlmlab.models.hf_llama import load_llama_layout
from dlmlab.models.transformer import Transformer

DREAM_MASK_ID = 151666  # the published Dream models' <|mask|> (used when neither config names one)
DREAM_TYPES = ("Dream", "dream")


def align_logits(logits: torch.Tensor) -> torch.Tensor:
    """Dream's output [B,T,V] -> logits [B,T,V] whose row ``i`` predicts the token at ``i``.

    Row ``i`` of the result is output row ``i - 1``; row 0 repeats output row 0 (as Dream's sampler does).
    """
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def load_dream(path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[Transformer, int]:
    """A local Dream folder -> (bidirectional :class:`Transformer` with Dream's unshifted output, mask token id)."""
    path = Path(path)
    hf = read_config(path)
    mask_id = mask_token_id(path, hf, DREAM_MASK_ID, int(hf.get("vocab_size", 0)), "Dream")  # before the weights
    return load_llama_layout(path, dtype, attn_mask="bidirectional", model_types=DREAM_TYPES), mask_id

"""TransformerLens's weight names and shapes on dlmlab models (``model.W_E``, ``model.W_Q`` ...).

:class:`EmbedViews` (every family: Transformer, Mamba, Mamba-2, LSTM, GRU):

* ``W_E`` [V, D]: the token embedding (the parameter itself);
* ``W_U`` [D, V_out]: the unembedding (a transposed view of the parameter); ``b_U`` [V_out] (zeros without a bias).

:class:`AttentionViews` (the Transformer), stacked over layers as TransformerLens stacks them (new
tensors built from the parameters, still on the autograd graph: editing them does not edit the model;
edit ``blocks[i].attn.W_q`` etc. for that):

* ``W_Q``, ``W_K``, ``W_V`` [L, H, D, d_head]; ``W_O`` [L, H, d_head, D];
* ``b_Q``, ``b_K``, ``b_V`` [L, H, d_head]; ``b_O`` [L, D] (zeros where the model has no bias);
* ``W_pos`` [max_seq_len, D] (learned positions only);
* ``W_in`` [L, D, d_mlp], ``b_in`` [L, d_mlp], ``W_out`` [L, d_mlp, D], ``b_out`` [L, D], and ``W_gate``
  [L, D, d_mlp] for a SwiGLU MLP (models with an MLP only).

``QK`` = ``W_Q @ W_K^T`` and ``OV`` = ``W_V @ W_O`` [L, H, D, D], as :class:`~dlmlab.interp.factored.FactoredMatrix`
(TransformerLens's ``model.QK`` / ``model.OV``; rotary models' QK is the product before RoPE, as there).

``q = resid_normed @ W_Q[l] + b_Q[l]`` per head, as in TransformerLens (before RoPE, which
TransformerLens applies after the same projection).
"""

from __future__ import annotations

import torch

from dlmlab.errors import UserError


class EmbedViews:
    """``W_E``, ``W_U``, ``b_U`` of a model with ``tok_emb`` (nn.Embedding) and ``unembed`` (nn.Linear)."""

    @property
    def W_E(self) -> torch.Tensor:
        return self.tok_emb.weight

    @property
    def W_U(self) -> torch.Tensor:
        return self.unembed.weight.T

    @property
    def b_U(self) -> torch.Tensor:
        b = self.unembed.bias
        return b if b is not None else torch.zeros(self.unembed.out_features, dtype=self.W_U.dtype,
                                                   device=self.W_U.device)


class AttentionViews(EmbedViews):
    """TransformerLens's stacked attention and MLP weights of a model whose blocks have ``attn.head_weights()``
    and, with an MLP, ``mlp.fc_in`` / ``fc_out`` (``fc_gate``)."""

    def _heads(self, key: str) -> torch.Tensor:
        return torch.stack([b.attn.head_weights()[key] for b in self.blocks])

    W_Q = property(lambda self: self._heads("W_Q"), doc="[L, H, D, d_head]")
    W_K = property(lambda self: self._heads("W_K"), doc="[L, H, D, d_head]")
    W_V = property(lambda self: self._heads("W_V"), doc="[L, H, D, d_head]")
    W_O = property(lambda self: self._heads("W_O"), doc="[L, H, d_head, D]")
    b_Q = property(lambda self: self._heads("b_Q"), doc="[L, H, d_head]")
    b_K = property(lambda self: self._heads("b_K"), doc="[L, H, d_head]")
    b_V = property(lambda self: self._heads("b_V"), doc="[L, H, d_head]")
    b_O = property(lambda self: self._heads("b_O"), doc="[L, D]")

    @property
    def QK(self):
        """``W_Q @ W_K^T`` [L, H, D, D], factored (:class:`~dlmlab.interp.factored.FactoredMatrix`)."""
        from dlmlab.interp.factored import FactoredMatrix

        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self):
        """``W_V @ W_O`` [L, H, D, D], factored (:class:`~dlmlab.interp.factored.FactoredMatrix`)."""
        from dlmlab.interp.factored import FactoredMatrix

        return FactoredMatrix(self.W_V, self.W_O)

    @property
    def W_pos(self) -> torch.Tensor:
        """[max_seq_len, D]: learned position embeddings."""
        if getattr(self, "pos_emb", None) is None:
            raise UserError(f"W_pos: this model has {self.cfg.positions!r} positions, not learned position "
                            "embeddings (positions: learned), so it has no W_pos")
        return self.pos_emb.weight

    def _mlp(self, name: str, what: str) -> list:
        mlps = [b.mlp for b in self.blocks]
        if any(m is None for m in mlps):
            raise UserError(f"{name}: this model is attention-only (model.d_mlp = 0), so it has no MLP weights")
        if what == "fc_gate" and any(getattr(m, "fc_gate", None) is None for m in mlps):
            raise UserError(f"{name}: this model's MLP is {mlps[0].kind!r}, not gated (swiglu), so it has no W_gate")
        return [getattr(m, what) for m in mlps]

    def _mlp_bias(self, name: str, what: str) -> torch.Tensor:
        lins = self._mlp(name, what)
        return torch.stack([lin.bias if lin.bias is not None
                            else torch.zeros(lin.out_features, dtype=lin.weight.dtype, device=lin.weight.device)
                            for lin in lins])

    W_in = property(lambda self: torch.stack([lin.weight.T for lin in self._mlp("W_in", "fc_in")]),
                    doc="[L, D, d_mlp]")
    W_gate = property(lambda self: torch.stack([lin.weight.T for lin in self._mlp("W_gate", "fc_gate")]),
                      doc="[L, D, d_mlp]")
    W_out = property(lambda self: torch.stack([lin.weight.T for lin in self._mlp("W_out", "fc_out")]),
                     doc="[L, d_mlp, D]")
    b_in = property(lambda self: self._mlp_bias("b_in", "fc_in"), doc="[L, d_mlp]")
    b_out = property(lambda self: self._mlp_bias("b_out", "fc_out"), doc="[L, D]")

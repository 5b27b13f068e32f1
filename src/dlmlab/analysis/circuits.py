"""QK / OV circuits per head and composition scores (TransformerLens conventions).

Per head (weights from ``blocks[i].attn.head_weights()``, activations are row vectors):

* ``W_QK = W_Q @ W_K^T``  [D, D]: attention score = x_q W_QK x_k^T (before scaling);
* ``W_OV = W_V @ W_O``    [D, D]: what the head writes, x_src W_OV.

Both have rank <= d_head and are kept :class:`Factored` (``A [.., D, r] @ B [.., r, D]``), so
norms, SVDs and eigenvalues cost O(D r^2).  Composition scores (Elhage et al. 2021) between an
earlier head (OV) and a later head::

    Q: ||W_OV^1 W_QK^2||_F  / (||W_OV^1||_F ||W_QK^2||_F)
    K: ||W_OV^1 W_QK^2^T||_F / (...)
    V: ||W_OV^1 W_OV^2||_F  / (...)

in [0, 1]; pairs with layer1 >= layer2 are 0 (TransformerLens ``all_composition_scores``).
LayerNorm weights are not part of these matrices: fold them in first with
:func:`dlmlab.analysis.fold.fold_ln` (exact: the normalisation stays, TransformerLens's ``fold_ln``), or
:func:`dlmlab.analysis.fold.fold_ln_frozen_scale` (a linearisation that also freezes the scales).  Needs an attention
model with per-head weights (``blocks.{i}.attn.head_weights()``); any other raises
:class:`~dlmlab.analysis.requires.UnsupportedModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.analysis.requires import require_attention, require_layer, require_modules

COMPOSITIONS = ("Q", "K", "V")


@dataclass
class Factored:
    """The matrix ``A @ B`` with A [..., m, r] and B [..., r, n], never formed unless asked."""

    A: torch.Tensor
    B: torch.Tensor

    def __post_init__(self) -> None:
        if self.A.shape[-1] != self.B.shape[-2]:
            raise ValueError(f"inner dimensions differ: A {tuple(self.A.shape)}, B {tuple(self.B.shape)}")

    @property
    def full(self) -> torch.Tensor:
        return self.A @ self.B

    @property
    def T(self) -> "Factored":
        return Factored(self.B.transpose(-1, -2), self.A.transpose(-1, -2))

    def __matmul__(self, other: "Factored") -> "Factored":
        return Factored(self.A, self.B @ other.A @ other.B)

    def norm(self) -> torch.Tensor:
        """Frobenius norm [...]: sqrt(tr((A^T A)(B B^T)))."""
        ga = self.A.transpose(-1, -2) @ self.A
        gb = self.B @ self.B.transpose(-1, -2)
        return (ga * gb.transpose(-1, -2)).sum(dim=(-1, -2)).clamp(min=0).sqrt()

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """U [..., m, r], S [..., r], Vh [..., r, n] of A @ B (thin SVD via two QRs)."""
        qa, ra = torch.linalg.qr(self.A)
        qb, rb = torch.linalg.qr(self.B.transpose(-1, -2))
        u, s, vh = torch.linalg.svd(ra @ rb.transpose(-1, -2))
        return qa @ u, s, vh @ qb.transpose(-1, -2)

    def eigenvalues(self) -> torch.Tensor:
        """The (up to r) non-trivial eigenvalues [..., r] of a square A @ B: those of B @ A."""
        if self.A.shape[-2] != self.B.shape[-1]:
            raise ValueError("eigenvalues need a square matrix")
        return torch.linalg.eigvals(self.B @ self.A)


def _weights(model, layer: int, analysis: str = "circuit analysis") -> dict[str, torch.Tensor]:
    require_attention(model, analysis, weights=True)
    require_layer(model, layer, analysis)
    return {k: v.detach() for k, v in model.blocks[layer].attn.head_weights().items()}


def qk_circuit(model, layer: int) -> Factored:
    """W_Q W_K^T of every head of ``layer``: Factored [H, D, dh] @ [H, dh, D]."""
    w = _weights(model, layer, "qk_circuit")
    return Factored(w["W_Q"], w["W_K"].transpose(-1, -2))


def ov_circuit(model, layer: int) -> Factored:
    """W_V W_O of every head of ``layer``: Factored [H, D, dh] @ [H, dh, D]."""
    w = _weights(model, layer, "ov_circuit")
    return Factored(w["W_V"], w["W_O"])


def all_circuits(model, kind: str) -> Factored:
    """Stacked [L, H, D, dh] @ [L, H, dh, D] circuits of kind "QK" or "OV"."""
    fn = {"QK": qk_circuit, "OV": ov_circuit}.get(kind)
    if fn is None:
        raise ValueError(f"circuit kind must be 'QK' or 'OV', got {kind!r}")
    require_attention(model, "all_circuits", weights=True)
    cs = [fn(model, i) for i in range(len(model.blocks))]
    return Factored(torch.stack([c.A for c in cs]), torch.stack([c.B for c in cs]))


def composition_scores(model, kind: str) -> torch.Tensor:
    """[L, H, L, H] Q-, K- or V-composition of (layer1, head1) into (layer2, head2); 0 unless layer1 < layer2."""
    if kind not in COMPOSITIONS:
        raise ValueError(f"composition kind must be one of {COMPOSITIONS}, got {kind!r}")
    ov = all_circuits(model, "OV")
    right = all_circuits(model, "QK" if kind in "QK" else "OV")
    if kind == "K":
        right = right.T
    L, H = ov.A.shape[:2]
    a1 = ov.A.reshape(L * H, *ov.A.shape[2:])  # [N, D, r]
    b1 = ov.B.reshape(L * H, *ov.B.shape[2:])  # [N, r, D]
    a2 = right.A.reshape(L * H, *right.A.shape[2:])
    b2 = right.B.reshape(L * H, *right.B.shape[2:])
    m = torch.einsum("xad,ydb->xyab", b1, a2)  # middle factor of product (x = left head, y = right head)
    g1 = a1.transpose(-1, -2) @ a1  # [N, r, r]
    g2 = b2 @ b2.transpose(-1, -2)
    sq = torch.einsum("xyab,xac,xycd,ydb->xy", m, g1, m, g2).clamp(min=0)
    n1 = Factored(a1, b1).norm()
    n2 = Factored(a2, b2).norm()
    scores = sq.sqrt() / (n1[:, None] * n2[None, :]).clamp(min=1e-12)
    scores = scores.reshape(L, H, L, H)
    layer = torch.arange(L, device=scores.device)
    allowed = (layer[:, None] < layer[None, :])[:, None, :, None]
    return torch.where(allowed, scores, torch.zeros((), device=scores.device, dtype=scores.dtype)).cpu()


def copying_scores(model) -> torch.Tensor:
    """[L, H] sum(eig) / sum(|eig|) of the full OV circuit W_E W_OV W_U (1 = a pure copying head)."""
    require_attention(model, "copying_scores", weights=True)
    require_modules(model, ("tok_emb", "unembed"), "copying_scores", "the embedding and unembedding")
    W_E = model.tok_emb.weight.detach()  # [V, D]
    W_U = model.unembed.weight.detach().T  # [D, V]
    ov = all_circuits(model, "OV")
    full = Factored(W_E @ ov.A, ov.B @ W_U)
    eig = full.eigenvalues()
    return (eig.sum(-1).real / eig.abs().sum(-1).clamp(min=1e-12)).cpu()

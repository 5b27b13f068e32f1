"""A low-rank matrix kept as two factors, ``M = A @ B``: what ``model.OV`` and ``model.QK`` return.

TransformerLens's ``FactoredMatrix`` conventions: ``A`` [..., ldim, mdim], ``B`` [..., mdim, rdim] (leading
dimensions broadcast: ``model.OV`` is [n_layers, n_heads, D, D] with mdim = d_head), ``AB`` the product,
``BA`` the reverse product, ``T`` the transpose, ``svd()`` -> ``(U, S, V)`` with ``M = U diag(S) V^T`` (V, not
V^T), ``eigenvalues`` (of ``BA``: AB's non-zero ones), ``norm()`` (Frobenius), ``m[l, h]`` indexing the
leading dimensions, and ``@`` with a tensor or another factored matrix on either side.  The SVD is taken
through QR factorisations of the factors, so ``AB`` ([D, D] per head) is never built for it.
"""

from __future__ import annotations

from functools import cached_property

import torch

from dlmlab.errors import UserError


class FactoredMatrix:
    """``M = A @ B`` with A [..., ldim, mdim], B [..., mdim, rdim] (shape [..., ldim, rdim])."""

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        if A.shape[-1] != B.shape[-2]:
            raise UserError(f"FactoredMatrix factors do not chain: A {tuple(A.shape)} @ B {tuple(B.shape)}")
        lead = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        self.A = A.broadcast_to(lead + A.shape[-2:])
        self.B = B.broadcast_to(lead + B.shape[-2:])
        self.ldim, self.mdim, self.rdim = A.shape[-2], A.shape[-1], B.shape[-1]
        self.shape = torch.Size(lead + (self.ldim, self.rdim))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def AB(self) -> torch.Tensor:
        """The product [..., ldim, rdim]."""
        return self.A @ self.B

    @property
    def BA(self) -> torch.Tensor:
        """The reverse product [..., mdim, mdim] (square matrices only)."""
        if self.ldim != self.rdim:
            raise UserError(f"BA needs a square matrix, this one is {tuple(self.shape)}")
        return self.B @ self.A

    @property
    def T(self) -> "FactoredMatrix":
        return FactoredMatrix(self.B.transpose(-2, -1), self.A.transpose(-2, -1))

    def __matmul__(self, other):
        if isinstance(other, FactoredMatrix):
            return FactoredMatrix(self.A, (self.B @ other.A) @ other.B)
        if other.dim() == 1:
            return self.A @ (self.B @ other)
        return FactoredMatrix(self.A, self.B @ other)

    def __rmatmul__(self, other):
        if other.dim() == 1:
            return (other @ self.A) @ self.B
        return FactoredMatrix(other @ self.A, self.B)

    def __mul__(self, scalar) -> "FactoredMatrix":
        return FactoredMatrix(self.A * scalar, self.B)

    __rmul__ = __mul__

    def __getitem__(self, idx) -> "FactoredMatrix":
        """Index the leading dimensions (``OV[layer, head]`` -> [D, D])."""
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) > self.ndim - 2:
            raise UserError(f"FactoredMatrix indexing takes the {self.ndim - 2} leading dimensions, got {len(idx)}")
        return FactoredMatrix(self.A[idx], self.B[idx])

    @cached_property
    def _svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        qa, ra = torch.linalg.qr(self.A)                       # A = Qa Ra
        qb, rb = torch.linalg.qr(self.B.transpose(-2, -1))     # B^T = Qb Rb
        u, s, vh = torch.linalg.svd(ra @ rb.transpose(-2, -1), full_matrices=False)  # Ra Rb^T (small)
        return qa @ u, s, qb @ vh.transpose(-2, -1)

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(U [..., ldim, k], S [..., k], V [..., rdim, k])`` with ``M = U diag(S) V^T``
        (k = min(ldim, mdim, rdim))."""
        return self._svd

    U = property(lambda self: self._svd[0])
    S = property(lambda self: self._svd[1])
    V = property(lambda self: self._svd[2])

    @property
    def eigenvalues(self) -> torch.Tensor:
        """The eigenvalues of ``BA`` [..., mdim] (complex): the non-zero eigenvalues of ``AB``."""
        ba = self.BA
        return torch.linalg.eigvals(ba.float() if ba.dtype in (torch.float16, torch.bfloat16) else ba)

    def norm(self) -> torch.Tensor:
        """The Frobenius norm [...]."""
        return self.S.pow(2).sum(-1).sqrt()

    def __repr__(self) -> str:
        return f"FactoredMatrix(shape={tuple(self.shape)}, mdim={self.mdim})"

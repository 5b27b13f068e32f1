"""Shared shell of the non-transformer sequence models (Mamba, Mamba-2, LSTM/GRU).

embed -> blocks -> final norm -> unembed, with hook points ``embed``, ``final`` and
``logits`` (blocks add their own).  Subclasses build ``tok_emb``, ``blocks``,
``ln_final`` and ``unembed`` and then call :meth:`finish_init`.
"""

from __future__ import annotations

import torch

from dlmlab.hooks import HookedModule, HookPoint
from dlmlab.models.checks import check_tokens


class StackedLM(HookedModule):
    def finish_init(self) -> None:
        self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
        self.setup_hooks()

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Raise ValueError naming the problem if ``tokens`` cannot be fed to this model."""
        check_tokens(tokens, self.cfg.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B,T] (long) -> logits [B,T,n_out]."""
        self.check_tokens(tokens)
        x = self.embed(self.tok_emb(tokens))
        for block in self.blocks:
            x = block(x)
        x = self.final(self.ln_final(x))
        return self.logits(self.unembed(x))


@torch.no_grad()
def record_mixer_states(model: StackedLM, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model`` with every ``block.mixer.record_states`` on; return each mixer's ``last_states``."""
    mixers = [b.mixer for b in model.blocks]
    for m in mixers:
        m.record_states = True
    try:
        model(tokens)
        return [m.last_states for m in mixers]
    finally:
        for m in mixers:
            m.record_states = False
            m.last_states = None

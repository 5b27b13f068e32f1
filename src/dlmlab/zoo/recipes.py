"""How each zoo entry is trained: the exact command (run from the repository root), where its run folder lands
inside the command's output folder, and how it is measured (:mod:`dlmlab.zoo.measure`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recipe:
    """``command``: argv with ``{out}`` for the output folder (``dlmlab`` = the installed CLI); ``run``: the run
    folder relative to ``{out}``; ``measure``: a function name of :mod:`dlmlab.zoo.measure`; ``eval``: its inputs."""

    description: str
    command: list[str]
    run: str
    measure: str
    eval: dict = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The output folder's name: one per distinct command."""
        import hashlib

        return hashlib.sha256("\0".join(self.command).encode()).hexdigest()[:10]


def _shakespeare(objective: str, what: str) -> Recipe:
    return Recipe(
        description=what,
        command=["dlmlab", "train", f"configs/zoo/shakespeare_{objective}.yaml", "--out", "{out}", "--no-progress"],
        run=".", measure="text_lm",
        eval={"n_seq": 32, "seq_len": 128, "lo": 0, "seed": 0, "source": "tinyshakespeare",
              "text_len": 128, "n_val": 32})


def _induction(objective: str, what: str) -> Recipe:
    """The cpu run's depth-2 model of seed 1 (at the cpu recipe both seeds of the AR and the DLM form their
    circuit; seed 1 was chosen when the zoo was first exported, from a recipe whose seed-0 AR had not)."""
    return Recipe(description=what, command=["dlmlab", "reproduce", "induction", "--preset", "cpu", "--out", "{out}"],
                  run=f"runs/{objective}_L2_s1", measure="induction", eval={"n_seq": 64, "seq_len": 64, "lo": 0, "seed": 0})


RECIPES: dict[str, Recipe] = {
    "induction_ar": _induction("ar", "the induction study's two-layer attention-only AR transformer (cpu recipe, "
                                     "seed 1), matched to induction_dlm: an induction head in layer 1 (its best "
                                     "layer-0 previous-token score is in its shows)"),
    "induction_dlm": _induction("dlm", "the induction study's two-layer attention-only masked-diffusion transformer "
                                       "(cpu recipe, seed 1), matched to induction_ar: previous- and next-token heads "
                                       "in layer 0, an induction head in layer 1"),
    "shakespeare_ar": _shakespeare("ar", "character-level AR transformer with MLPs on Tiny Shakespeare (3 layers, "
                                         "d_model 128, 4 heads), the AR twin of shakespeare_mdlm"),
    "shakespeare_mdlm": _shakespeare("mdlm", "character-level masked-diffusion (MDLM) transformer with MLPs on Tiny "
                                             "Shakespeare (3 layers, d_model 128, 4 heads), the twin of shakespeare_ar"),
}

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
    return Recipe(description=what, command=["dlmlab", "reproduce", "induction", "--preset", "cpu", "--out", "{out}"],
                  run=f"runs/{objective}_L2", measure="induction", eval={"n_seq": 64, "seq_len": 64, "lo": 0, "seed": 0})


RECIPES: dict[str, Recipe] = {
    "induction_ar": Recipe(
        description="the induction study's two-layer attention-only AR transformer, matched to induction_dlm (cpu "
                    "recipe, seed 0) but trained 40000 steps instead of 22000 (at 22000 the cpu run's AR had formed "
                    "no induction circuit): a previous-token head in layer 0 and an induction head in layer 1",
        command=["python", "-m", "dlmlab.zoo.induction_model", "--objective", "ar", "--layers", "2", "--steps",
                 "40000", "--out", "{out}", "--no-progress"],
        run="run", measure="induction", eval={"n_seq": 64, "seq_len": 64, "lo": 0, "seed": 0}),
    "induction_dlm": _induction("dlm", "the induction study's two-layer attention-only masked-diffusion transformer "
                                       "(cpu recipe, seed 0), matched to induction_ar: previous- and next-token heads "
                                       "in layer 0, an induction head in layer 1"),
    "shakespeare_ar": _shakespeare("ar", "character-level AR transformer with MLPs on Tiny Shakespeare (3 layers, "
                                         "d_model 128, 4 heads), the AR twin of shakespeare_mdlm"),
    "shakespeare_mdlm": _shakespeare("mdlm", "character-level masked-diffusion (MDLM) transformer with MLPs on Tiny "
                                             "Shakespeare (3 layers, d_model 128, 4 heads), the twin of shakespeare_ar"),
}

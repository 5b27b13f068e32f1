"""The model zoo: small models the project trains itself, shipped inside the package, loaded by name.

    import dlmlab
    run = dlmlab.load("zoo:induction_dlm")        # a Loaded, as for any run folder
    dlmlab zoo                                     # the entries, with what each one shows
    make zoo                                       # retrain every entry from its recorded command

Each entry is a folder ``src/dlmlab/zoo/models/NAME/`` holding one checkpoint as ``dlmlab train`` writes it
(``model.safetensors``, ``state.json``, ``model.json``, ``tokenizer.json``; no optimizer state), its training
curve (``curve.jsonl``: step, loss) and ``zoo.json``: the command and commit that trained it, its wall time, and
``shows``, the measurements :mod:`dlmlab.zoo.measure` made of it when it was exported (head scores, induction
accuracy, NELBO / NLL), which the tests recompute so a change that breaks a circuit fails.
"""

from __future__ import annotations

from dlmlab.rundir.zoo import PREFIX, ROOT, ZooEntry, entries, entry, is_zoo, resolve

__all__ = ["PREFIX", "ROOT", "ZooEntry", "entries", "entry", "is_zoo", "resolve"]

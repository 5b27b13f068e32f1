"""Tokenizers: characters, or byte-level BPE trained locally with Hugging Face ``tokenizers``.

A masked-diffusion run adds its mask token one id past the tokenizer's vocabulary
(``mask_id = vocab_size``, :meth:`dlmlab.objectives.MaskedDiffusionObjective.for_vocab`); ``decode`` shows that id as
:data:`MASK_TEXT` and refuses any other id outside the vocabulary with a one-line ``ValueError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Protocol

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dlmlab.files import atomic_write_text

MASK_TEXT = "[M]"  # how decode shows the mask id of a masked-diffusion run (vocab_size)


def _decode_with_mask(ids: list[int], vocab_size: int, decode_span: Callable[[list[int]], str]) -> str:
    """``decode_span`` of each run of vocabulary ids, with the mask id (``vocab_size``) as :data:`MASK_TEXT`."""
    out, span = [], []
    for i in ids:
        i = int(i)
        if i == vocab_size:
            out += [decode_span(span) if span else "", MASK_TEXT]
            span = []
        elif 0 <= i < vocab_size:
            span.append(i)
        else:
            raise ValueError(f"token id {i} is outside this tokenizer's vocabulary (ids 0..{vocab_size - 1}, "
                             f"and {vocab_size} for a masked-diffusion run's mask)")
    if span:
        out.append(decode_span(span))
    return "".join(out)


class TextTokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def to_json(self) -> str: ...
    def save(self, path: str | Path) -> None: ...


class CharTokenizer:
    """One id per distinct character of the training text."""

    def __init__(self, chars: list[str]) -> None:
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}
        self.vocab_size = len(chars)

    @classmethod
    def train(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in this tokenizer's vocabulary") from None

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``; the mask id of an mdlm run (``vocab_size``) reads :data:`MASK_TEXT`."""
        return _decode_with_mask(ids, self.vocab_size, lambda span: "".join(self.chars[i] for i in span))

    def to_json(self) -> str:
        return json.dumps({"type": "char", "chars": self.chars})

    def save(self, path: str | Path) -> None:
        """Write the tokenizer file in one step (a reader never sees half of it)."""
        atomic_write_text(path, self.to_json())


class BPETokenizer:
    """Byte-level BPE (GPT-2 style) trained on local text."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()

    @classmethod
    def train(cls, text: str | list[str], vocab_size: int = 1024, special_tokens: list[str] | None = None) -> "BPETokenizer":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens or [],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator([text] if isinstance(text, str) else text, trainer=trainer)
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``; the mask id of an mdlm run (``vocab_size``) reads :data:`MASK_TEXT`."""
        return _decode_with_mask(ids, self.vocab_size, lambda span: self.tok.decode(span))

    def to_json(self) -> str:
        return self.tok.to_str(pretty=True)  # (what Tokenizer.save writes)

    def save(self, path: str | Path) -> None:
        """Write the tokenizer file in one step (a reader never sees half of it)."""
        atomic_write_text(path, self.to_json())


def load_tokenizer(path: str | Path) -> TextTokenizer:
    """The tokenizer a ``save`` wrote to ``path``."""
    return tokenizer_from_json(Path(path).read_text(encoding="utf-8"))


def tokenizer_from_json(text: str) -> TextTokenizer:
    """The tokenizer whose ``to_json()`` is ``text``."""
    data = json.loads(text)
    if data.get("type") == "char":
        return CharTokenizer(data["chars"])
    return BPETokenizer(Tokenizer.from_str(text))


def train_tokenizer(kind: str, text: str, vocab_size: int = 1024) -> TextTokenizer:
    if kind == "char":
        return CharTokenizer.train(text)
    if kind == "bpe":
        return BPETokenizer.train(text, vocab_size)
    raise ValueError(f"unknown tokenizer {kind!r} (use char or bpe)")

"""Vocabulary built from training captions, saved with the model as JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from rlcap.errors import DataError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocab:
    """Word <-> id. Ids 0..3 are ``<pad> <bos> <eos> <unk>``."""

    def __init__(self, words: Sequence[str]):
        if tuple(words[: len(SPECIALS)]) != SPECIALS:
            raise DataError(f"vocabulary must start with {SPECIALS}, got {tuple(words[:4])}")
        self.itos: list[str] = list(words)
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], min_count: int = 5) -> "Vocab":
        """Words seen at least ``min_count`` times, most frequent first (ties alphabetical)."""
        counts = Counter(w for tokens in token_lists for w in tokens)
        kept = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                      key=lambda w: (-counts[w], w))
        return cls(list(SPECIALS) + kept)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Words -> ids (unknown words -> UNK); no BOS/EOS added."""
        return [self.stoi.get(w, UNK) for w in tokens]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> caption text, cut at the first EOS (or PAD); BOS is skipped."""
        words = []
        for i in ids:
            i = int(i)
            if i in (EOS, PAD):
                break
            if i == BOS:
                continue
            words.append(self.itos[i])
        return " ".join(words)

    def to_json(self) -> str:
        return json.dumps({"itos": self.itos})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(data["itos"])
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"cannot read vocabulary {path}: {exc}") from exc

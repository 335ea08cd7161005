"""The decoding configuration and the decoder it names."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlcap.decoding.beam import beam_search
from rlcap.decoding.result import DecodeResult
from rlcap.decoding.sampling import greedy, sample
from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats

METHODS = ("greedy", "sample", "beam")


@dataclass
class DecodeConfig:
    """How captions are generated."""

    method: str = field(default="greedy", metadata={"help": f"one of {', '.join(METHODS)}"})
    max_len: int = field(default=16, metadata={"help": "most words per caption, EOS included"})
    n: int = field(default=1, metadata={"help": "samples per image (method=sample)"})
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature when sampling"})
    top_k: int = field(default=0, metadata={"help": "sample among the k most likely words only (0: all)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling: smallest word set with this mass (1: all)"})
    beam_size: int = field(default=3, metadata={"help": "beams per image (method=beam)"})
    n_best: int = field(default=1, metadata={"help": "captions returned per image by beam search, best first"})
    length_penalty: float = field(default=0.0, metadata={"help": "final beam score = sum logprob / length**alpha"})
    no_repeat_ngram: int = field(default=0, metadata={
        "help": "beam search never repeats an n-gram of this many words (0: off); greedy decoding and sampling "
                "ignore it"})

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"decode.method: unknown method {self.method!r}; expected one of {', '.join(METHODS)}")
        checks = [("max_len", self.max_len, self.max_len >= 1, ">= 1"), ("n", self.n, self.n >= 1, ">= 1"),
                  ("temperature", self.temperature, self.temperature > 0, "> 0"),
                  ("top_k", self.top_k, self.top_k >= 0, ">= 0"),
                  ("top_p", self.top_p, 0 < self.top_p <= 1, "in (0, 1]"),
                  ("beam_size", self.beam_size, self.beam_size >= 1, ">= 1"),
                  ("n_best", self.n_best, 1 <= self.n_best <= self.beam_size, "in [1, beam_size]"),
                  ("no_repeat_ngram", self.no_repeat_ngram, self.no_repeat_ngram >= 0, ">= 0")]
        for name, value, ok, expected in checks:
            if not ok:
                raise ConfigError(f"decode.{name}: expected {expected}, got {value}")


def decode(model: Captioner, feats: Feats, cfg: DecodeConfig, generator: torch.Generator | None = None,
           prefix: torch.Tensor | None = None, return_hidden: bool = False) -> DecodeResult:
    """Run the decoder named by ``cfg.method``. ``prefix``: (B*n, P) for sampling (one per sample),
    (B, P) for greedy and beam search (one per image)."""
    if cfg.method == "greedy":
        return greedy(model, feats, cfg.max_len, prefix, return_hidden)
    if cfg.method == "sample":
        return sample(model, feats, cfg.n, cfg.max_len, cfg.temperature, cfg.top_k, cfg.top_p, generator,
                      prefix, return_hidden)
    return beam_search(model, feats, cfg.beam_size, cfg.max_len, cfg.length_penalty, cfg.n_best, prefix, return_hidden,
                       cfg.no_repeat_ngram)

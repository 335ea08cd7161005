"""How a run generates captions: one typed, frozen object, built once per run and handed to every decode.

A :class:`Decoding` holds the run's ``decode`` section (the method, the lengths, the beam's ranking and
blocking, the sampling temperature) and the two settings its device chooses, ``exit_every`` and ``compile``
(:mod:`rlcap.decoding.stepping`), resolved once when it is built (:meth:`Decoding.of_run`). A training session
holds its run's (``session.decoding``), a checkpoint opened for inference its own (``OpenRun.decoding``). A
loop takes the variant it needs (:meth:`Decoding.as_sampling` for its rollouts, :meth:`Decoding.as_greedy`
for a self-critical baseline) and calls :func:`rlcap.decoding.options.decode`. The decoders underneath
(:func:`rlcap.decoding.sample`, ``beam_search``, ``prefix_rollouts``, ``continue_decoding``) take it too, and
read only the fields their method uses; ``greedy`` and ``greedy_segments`` take their few settings as arguments.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlcap.decoding.stepping import resolve_compile, resolve_exit_every
from rlcap.errors import ConfigError

METHODS = ("greedy", "sample", "beam")


class DecodeSection(Protocol):
    """What a :class:`Decoding` is built from: a run's ``decode`` section (rlcap.run_config.DecodeSettings)."""

    max_len: int
    temperature: float
    beam_size: int
    length_penalty: float
    no_repeat_ngram: int


@dataclass(frozen=True)
class Decoding:
    """One way of generating captions; ``exit_every`` and ``compile`` are already resolved for a device."""

    method: str                  # greedy, sample or beam
    max_len: int                 # most words (subwords) per caption, a prefix included
    beam_size: int = 1           # beam: the beams kept per image
    length_penalty: float = 0.0  # beam: ranked by sum logprob / length ** this (0: off)
    no_repeat_ngram: int = 0     # beam: never repeat an n-gram of this many words (0: off)
    temperature: float = 1.0     # sample: the softmax temperature words are drawn at
    top_k: int = 0               # sample: only the k most likely words (0: all)
    top_p: float = 1.0           # sample: only the nucleus of this probability mass (1: all)
    exit_every: int = 1          # steps between two checks that every caption has ended (0: never)
    compile: bool = False        # each step compiled by torch.compile

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"decoding method: {self.method!r} is not one of {list(METHODS)}")
        if self.max_len < 1 or self.beam_size < 1 or self.exit_every < 0:
            raise ConfigError(f"decoding: expected max_len >= 1, beam_size >= 1 and exit_every >= 0, got "
                              f"{self.max_len}, {self.beam_size} and {self.exit_every}")

    @classmethod
    def on(cls, device: torch.device | str, method: str, max_len: int, *, exit_every: int | None = None,
           compile: bool | str = "auto", **settings: Any) -> Decoding:
        """``method`` with ``settings`` (the fields above), ``exit_every`` and ``compile`` resolved for ``device``
        (None and ``auto``: as :func:`resolve_exit_every` and :func:`resolve_compile` choose)."""
        return cls(method, max_len, exit_every=resolve_exit_every(exit_every, device),
                   compile=resolve_compile(compile, device), **settings)

    @classmethod
    def search(cls, device: torch.device | str, beam_size: int, max_len: int, **settings: Any) -> Decoding:
        """Beam search of ``beam_size``, greedy when that is 1 (as validation and evaluation decode), on ``device``
        (:meth:`on`: ``settings``, ``exit_every`` and ``compile`` too)."""
        return cls.on(device, "greedy" if beam_size <= 1 else "beam", max_len, beam_size=beam_size, **settings)

    @classmethod
    def of_run(cls, section: DecodeSection, device: torch.device | str) -> Decoding:
        """A run's decoding, from its ``decode`` section, on ``device``: as validation and evaluation decode
        (:meth:`search`); its sampling settings are :meth:`as_sampling`'s."""
        return cls.search(device, section.beam_size, section.max_len, length_penalty=section.length_penalty,
                          no_repeat_ngram=section.no_repeat_ngram, temperature=section.temperature)

    def as_greedy(self) -> Decoding:
        return dataclasses.replace(self, method="greedy")

    def as_sampling(self) -> Decoding:
        return dataclasses.replace(self, method="sample")

    def as_beam(self) -> Decoding:
        """Beam search of ``beam_size``, even of size 1."""
        return dataclasses.replace(self, method="beam")

    def eager(self) -> Decoding:
        """Each step uncompiled (a decode too short to repay a compilation)."""
        return dataclasses.replace(self, compile=False)

    def as_n_best(self, n: int) -> Decoding:
        """The beam of ``rl.sample_method: beam``: max(n, 2) beams ranked by log-probability alone (no length
        penalty, no blocking), whose n best are the samples (:func:`decode` with ``n``)."""
        return dataclasses.replace(self, method="beam", beam_size=max(n, 2), length_penalty=0.0, no_repeat_ngram=0)

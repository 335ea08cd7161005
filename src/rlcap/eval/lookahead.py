"""Choosing lookahead inference's lambda on validation ([Shi18 Fig. 1]).

A checkpoint of ``algorithm: ac`` holds the policy and the value network. Its validation split is
decoded with :func:`rlcap.decoding.lookahead_search` at each lambda and scored with CIDEr-D; the
best lambda is the one to caption with. ``lambda = 1`` is plain beam search, so it is the
reference every other value is compared with. Used at the end of an ``ac`` run (``ac.lookahead``)
and by ``rlcap eval CHECKPOINT --lookahead 0.3,0.5,1.0``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from rlcap.data.loader import SplitData
from rlcap.data.vocab import Vocab
from rlcap.decoding import lookahead_search
from rlcap.decoding.options import Decoding
from rlcap.devices import Precision
from rlcap.errors import RlcapError
from rlcap.files import write_json
from rlcap.eval.open_run import open_run
from rlcap.models import ValueModel
from rlcap.train.checkpoint import MANIFEST
from rlcap.train.validation import score_predictions
from rlcap.train.session import Session

log = logging.getLogger(__name__)


class LookaheadChoice(NamedTuple):
    best: float                 # the lambda with the highest CIDEr-D (ties: the larger lambda)
    scores: dict[float, float]  # lambda -> corpus CIDEr-D


@torch.inference_mode()
def lookahead_predictions(policy: torch.nn.Module, value_net: ValueModel, split: SplitData, vocab: Vocab, lam: float,
                          decoding: Decoding, batch_size: int = 100, limit: int = 0, progress: bool = False,
                          precision: Precision = Precision()) -> dict[str, str]:
    """image id -> the caption lookahead inference at ``lam`` gives, for ``split`` (its first ``limit``
    images; 0: all), with ``decoding``'s beam size, length and length penalty, the forward passes in ``precision``
    (the run's). Both networks are decoded in eval mode and given back in the mode they came in."""
    modes = policy.training, value_net.training
    policy.eval()
    value_net.eval()
    predictions = {}
    for batch in tqdm(list(split.eval_batches(batch_size, limit)), desc=f"lookahead {lam}", disable=not progress,
                      leave=False):
        with precision.forward():
            out = lookahead_search(policy, value_net, batch.feats, decoding.beam_size, decoding.max_len, lam,
                                   decoding.length_penalty)
        predictions.update({i: vocab.decode(row.tolist()) for i, row in zip(batch.ids, out.tokens)})
    policy.train(modes[0])
    value_net.train(modes[1])
    return predictions


def lookahead_scores(policy: torch.nn.Module, value_net: ValueModel, split: SplitData, vocab: Vocab,
                     lambdas: list[float], decoding: Decoding, batch_size: int = 100, limit: int = 0,
                     progress: bool = False, precision: Precision = Precision()) -> LookaheadChoice:
    """Corpus CIDEr-D of ``split`` (its first ``limit`` images; 0: all) decoded at each lambda."""
    scores: dict[float, float] = {}
    for lam in lambdas:
        predictions = lookahead_predictions(policy, value_net, split, vocab, lam, decoding, batch_size, limit,
                                            progress, precision)
        scores[lam] = score_predictions(split, predictions, ["CIDEr"]).corpus["CIDEr"]
    best = max(scores, key=lambda lam: (scores[lam], lam))
    return LookaheadChoice(best, scores)


def read_choice(folder: str | Path) -> dict:
    """``lookahead.json`` of an ``ac`` run folder (written when ``ac.lookahead`` lists lambdas)."""
    path = Path(folder) / "lookahead.json"
    if not path.is_file():
        raise RlcapError(f"{path} is missing: the ac run chooses lookahead's lambda on validation only when its "
                         "config lists them (ac.lookahead: [0.3, 0.5, 0.7, 1.0])")
    return json.loads(path.read_text(encoding="utf-8"))


def lookahead_for_run(s: Session, lambdas: list[float]) -> LookaheadChoice:
    """At the end of an ``ac`` run: its best checkpoint on the validation split at each lambda;
    writes ``out_dir/lookahead.json``. A run continued after it finished (the same settings) keeps the
    choice lookahead.json holds when that was made for the same best checkpoint and decoding settings."""
    cfg = s.cfg
    best = s.out_dir / "best"
    made_for = {"step": json.loads((best / MANIFEST).read_text(encoding="utf-8"))["step"],
                "lambdas": sorted(lambdas), "max_images": cfg.val.max_images, "beam_size": cfg.decode.beam_size,
                "max_len": cfg.decode.max_len, "length_penalty": cfg.decode.length_penalty}
    path = s.out_dir / "lookahead.json"
    before = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if before.get("made_for") == made_for and before.get("split") == cfg.val.split:
        log.info("lookahead: %s was chosen for this best checkpoint before (%s), kept", before["best_lambda"], path)
        return LookaheadChoice(before["best_lambda"], {float(k): v for k, v in before["scores"].items()})
    run = open_run(best, device="cpu", value=True)
    choice = lookahead_scores(run.policy, run.value, s.data.splits[cfg.val.split], run.vocab, lambdas, s.decoding,
                              cfg.val.batch_size, cfg.val.max_images, precision=run.precision)
    write_choice(path, choice, cfg.val.split, str(best), made_for)
    log.info("lookahead on %s: best lambda %s (CIDEr-D %s)", cfg.val.split, choice.best,
             ", ".join(f"{lam}: {v:.4f}" for lam, v in choice.scores.items()))
    return choice


def write_choice(path: Path, choice: LookaheadChoice, split: str, checkpoint: str,
                 made_for: dict | None = None) -> None:
    """``made_for``: what the choice was made for (the best checkpoint's step, the lambdas and the decoding
    settings; an ``ac`` run that ends again with the same keeps the file)."""
    rows = {"checkpoint": checkpoint, "split": split, "metric": "CIDEr", "best_lambda": choice.best,
            "scores": {str(lam): v for lam, v in choice.scores.items()},
            **({"made_for": made_for} if made_for is not None else {})}
    write_json(path, rows, indent=2)

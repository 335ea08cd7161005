"""The transformers captioners' architecture (``model.arch: hf``, :class:`rlcap.models.architecture.Architecture`): a
captioner from a local folder (:mod:`rlcap.models.hf.captioner`), its tokenizer the text codec, started from such
a folder by ``init_from``, trained whole, by its decoder or by LoRA adapters (:data:`TRAINING_KEYS`).

A checkpoint holds the policy as a complete transformers folder, ``hf/`` (:data:`EXPORT`), that
``from_pretrained`` loads, and its ``model.path`` is that folder, relative to the checkpoint
(``model_path_relative_to: checkpoint``), so that it opens from any working directory and after the folder its
run started from has moved or gone; an older checkpoint's ``model.path``, relative to the folder its run was
trained in, is read from there when it exists, else from its ``hf/`` (:meth:`HFArchitecture.found_section`)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from torch import nn

from rlcap.data.hf_text import TokenizerVocab
from rlcap.errors import ConfigError, RlcapError
from rlcap.models.base import ExportsPretrained, let_go_of_aside
from rlcap.models.hf.captioner import HFCaptioner, is_transformers_folder
from rlcap.models.hf.vlm import HFVLMCaptioner, is_vlm_folder, vlm_codec
from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner, is_seq2seq_vlm
from rlcap.models.model_config import ModelConfig
from rlcap.models.hf.model_card import FromFolder, Prompted, add_scores, base_model_of, write_card

log = logging.getLogger(__name__)

EXPORT = "hf"  # the folder of a checkpoint that holds the policy as a transformers folder (its model.path)
# what trains (model.train), LoRA's rank and alpha, and how (the weights' dtype, gradient checkpointing)
TRAINING_KEYS = ("train", "train_vision", "lora_rank", "lora_alpha", "dtype", "gradient_checkpointing")


class HFArchitecture:
    """Transformers captioners from a local folder: VisionEncoderDecoder, BLIP, GIT, and vision-language models
    (decoder-only ones: :class:`~rlcap.models.hf.vlm.HFVLMCaptioner`; docs/MODELS.md)."""

    training_keys = TRAINING_KEYS
    brings_text_codec = True  # its tokenizer
    starts_trained = True  # model.path's weights
    scores_samples = True  # every captioner of it: rlcap.models.hf.scoring.ScoredInOnePass

    def build(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
        """The captioner of ``model.path``, on its stored tower tokens (``att_dim`` wide); an encoder-decoder
        vision-language model (Florence-2: :func:`~rlcap.models.hf.seq2seq_vlm.is_seq2seq_vlm`) as its policy."""
        if is_vlm_folder(cfg.path):
            return HFVLMCaptioner(cfg.path, vocab_size, att_dim, train=cfg.train, lora_rank=cfg.lora_rank,
                                  lora_alpha=cfg.lora_alpha, prompt=cfg.prompt, dtype=cfg.dtype,
                                  gradient_checkpointing=cfg.gradient_checkpointing, train_vision=cfg.train_vision)
        if cfg.train_vision != "frozen":  # (the captioners' towers stand in for stored tokens: not built yet)
            raise ConfigError(f"model.train_vision={cfg.train_vision}: {cfg.path} is not a vision-language model; "
                              "rlcap trains the image side of vision-language models only (docs/MODELS.md)")
        if is_seq2seq_vlm(cfg.path):
            return Seq2SeqVLMCaptioner(cfg.path, vocab_size, att_dim, train=cfg.train, lora_rank=cfg.lora_rank,
                                       lora_alpha=cfg.lora_alpha, prompt=cfg.prompt, dtype=cfg.dtype,
                                       gradient_checkpointing=cfg.gradient_checkpointing)
        if cfg.dtype != "float32" or cfg.gradient_checkpointing:
            raise ConfigError(f"model.dtype={cfg.dtype}, model.gradient_checkpointing={cfg.gradient_checkpointing}: "
                              f"{cfg.path} is a captioner (VisionEncoderDecoder, BLIP, GIT), which rlcap loads in "
                              "float32 and runs without checkpointing; both keys apply to vision-language models")
        return HFCaptioner(cfg.path, vocab_size, att_dim, train=cfg.train, lora_rank=cfg.lora_rank,
                           lora_alpha=cfg.lora_alpha)

    def new(self, cfg: ModelConfig, vocab: Any, fc_dim: int, att_dim: int) -> nn.Module:
        return self.build(cfg, len(vocab), fc_dim, att_dim)

    def online_features(self, cfg: ModelConfig, data: Any, device: Any) -> Any:
        """A split's features computed from its pictures (``data.images``) by the encoder ``rlcap features --encoder
        hf:PATH`` writes this policy's store with (its processor and frozen image side: rlcap.encoders.online),
        loaded once, when a split first asks; for a policy that trains its image side (``model.train_vision``),
        the processor's outputs it runs that side on."""
        from rlcap.encoders.hf import HF_PREFIX
        from rlcap.encoders.load import load_encoder
        from rlcap.encoders.online import OnlineFeatures
        from rlcap.encoders.sources import record_pictures

        loaded: list[Any] = []

        def of(records: list[Any]) -> OnlineFeatures:
            if not loaded:
                loaded.append(load_encoder(HF_PREFIX + str(cfg.path), None, device))
            pictures = record_pictures(records, data.dataset, data.images)
            return OnlineFeatures(pictures, [r.id for r in records], loaded[0], cfg.path,
                                  pixels=cfg.train_vision != "frozen", workers=data.workers)

        return of

    def reads(self, cfg: ModelConfig, key: str) -> bool:
        """Its folder and what trains; LoRA's rank and alpha only when LoRA adapters train."""
        return key in ("path", "train", "train_vision", "prompt", "dtype", "gradient_checkpointing") or \
            (key in ("lora_rank", "lora_alpha") and cfg.train == "lora")

    def text_codec(self, cfg: ModelConfig) -> Any:
        """The captioner's own tokenizer: it reads text through it."""
        return vlm_codec(cfg.path) if is_vlm_folder(cfg.path) else TokenizerVocab.from_folder(cfg.path)

    def start_section(self, model: ModelConfig, folder: str | Path) -> ModelConfig | None:
        """A transformers captioner's folder (an ``hf/`` export, a downloaded captioner): ``model.arch=hf`` with
        ``model.path`` there, whose weights and tokenizer start the run."""
        if not is_transformers_folder(folder):
            return None
        log.info("init_from %s is a transformers captioner: model.arch=hf with model.path there", folder)
        return dataclasses.replace(model, arch="hf", path=str(Path(folder).expanduser().resolve()))

    def saved_section(self, config: dict[str, Any]) -> dict[str, Any]:
        """``model.path`` the checkpoint's own ``hf/``, relative to it (what :meth:`export` writes there: the tuned
        policy, its tower, tokenizer and processor)."""
        return {**config, "model": {**config["model"], "path": EXPORT}, "model_path_relative_to": "checkpoint"}

    def found_section(self, folder: Path, config: dict[str, Any]) -> dict[str, Any]:
        """``model.path`` absolute: relative to the checkpoint ``folder`` when the config says so; else (an older
        rlcap's) relative to the working directory when it is there, or else the checkpoint's own ``hf/``, with a
        line saying so."""
        model = config["model"]
        given = Path(model["path"]).expanduser()
        if config.get("model_path_relative_to") == "checkpoint":
            path = folder / given
        elif given.is_dir():
            path = given
        elif (folder / EXPORT).is_dir():
            path = folder / EXPORT
            log.info("%s: its model.path %s is not found from %s (an older checkpoint, whose path is relative to "
                     "the folder its run was trained in): the policy is read from the checkpoint's own %s/", folder,
                     model["path"], Path.cwd(), EXPORT)
        else:
            raise RlcapError(f"{folder}: its model.path {model['path']} is not found from {Path.cwd()} (relative to "
                             f"the folder its run was trained in) and it holds no {EXPORT}/ folder: run the command "
                             "from that folder")
        return {**config, "model": {**model, "path": os.path.abspath(path)}}

    def export(self, module: nn.Module, folder: Path, config: dict[str, Any], previous: Path | None) -> None:
        """The policy as a transformers folder of its own, ``hf/``, whose ``generate()`` decodes as the run does;
        its frozen tower linked from ``previous``'s hf/ when that holds the same (:mod:`rlcap.models.hf.export`), and
        its model card (:mod:`rlcap.models.hf.model_card`), with the prompt a prompted policy reads (and its
        ``prompt.json``). The image side kept aside, which it read, lets go of its pages after
        (:func:`rlcap.models.base.let_go_of_aside`)."""
        if isinstance(module, ExportsPretrained):
            module.export_pretrained(folder / EXPORT, config["decode"], previous / EXPORT if previous else None)
            write_card(folder / EXPORT, config, _base_model(module, folder / EXPORT),
                       prompt=module.prompt if isinstance(module, Prompted) else None)
            let_go_of_aside(module)


    def evaluated(self, folder: Path, scores: dict[str, Any]) -> None:
        """The model card of the checkpoint's ``hf/`` takes ``scores`` when they were decoded with the checkpoint's
        own settings (:func:`rlcap.models.hf.model_card.add_scores`)."""
        add_scores(folder, scores)

def _base_model(module: nn.Module, exported: Path) -> str:
    """What the exported policy was tuned from (:func:`rlcap.models.hf.model_card.base_model_of` its source folder)."""
    return base_model_of(module.folder) if isinstance(module, FromFolder) else str(exported.resolve())


HF = HFArchitecture()

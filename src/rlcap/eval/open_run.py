"""A trained run opened for inference: the one way rlcap reads a checkpoint folder to caption with it.

:func:`open_run` reads the checkpoint once and gives an :class:`OpenRun`: the policy (and, for an
actor-critic run, its value network) in eval mode on the device asked for, the vocabulary, the run's
config and decoding settings, and the run's data found and checked as the checkpoint describes it.
``rlcap eval``, ``rlcap caption``, lookahead inference, ``rlcap bench``, ``rlcap diagnose`` and the report's
HRL segments all open checkpoints this way. Training reads its own checkpoints with
:func:`rlcap.train.checkpoint.load_checkpoint` (weights, optimizers, random state).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlcap.config import apply_overrides, from_dict
from rlcap.data.concepts import DATASET_FILE, FEATURES_FILE
from rlcap.data.features import open_feature_store
from rlcap.data.loader import DATA_PATHS, CaptionData, DataConfig, load_data
from rlcap.data.vocab import Vocab
from rlcap.decoding.options import Decoding
from rlcap.devices import Precision, resolve_device
from rlcap.errors import DataError, RlcapError
from rlcap.models import ValueModel, build_model, build_value_model
from rlcap.models.base import check_policy_fits, settle_aside, share_image_side
from rlcap.models.architectures import architecture, online_features
from rlcap.models.model_config import ModelConfig
from rlcap.models.value import value_features
from rlcap.run_config import DecodeSettings
from rlcap.train.checkpoint import POLICY, VALUE, Checkpoint, load_checkpoint, load_weights


@dataclass(frozen=True)
class OpenRun:
    """A checkpoint folder opened for inference (:func:`open_run`)."""

    folder: Path
    policy: torch.nn.Module    # the captioner, in eval mode, on ``device``
    vocab: Vocab
    config: dict[str, Any]     # the run's config.json: its run config, plus ``feature_dims``
    decoding: Decoding         # the run's ``decode`` section, with the values given to open_run over it, on ``device``
    device: torch.device
    value: ValueModel | None = None  # actor-critic's value network ([Shi18]; open_run(value=True)), eval mode
    precision: Precision = Precision()  # the forward passes': the run's own unless open_run was given another
    section: ModelConfig | None = None  # the policy's model section (what computes its image tokens with no store)

    def data_config(self, overrides: list[str] | None = None, dataset: str | Path | None = None) -> DataConfig:
        """The run's data section with ``key=value`` ``overrides``, its paths found as
        :func:`checkpoint_data_config` says; ``dataset``: a folder built by ``rlcap data concepts`` to read
        instead of the run's own data (:func:`dataset_overrides`; ``overrides`` still apply after it).
        Features of another image size than the run was trained on are refused (:func:`check_feature_image_size`)."""
        if dataset is not None:
            overrides = [*dataset_overrides(dataset), *(overrides or [])]
        config = checkpoint_data_config(self.folder, self.config, overrides)
        if config.features:  # (none: the policy's own image side reads the pictures)
            check_feature_image_size(self.folder, self.config, config.features)
        return config

    def data(self, splits: Sequence[str], overrides: list[str] | None = None, dataset: str | Path | None = None,
             data_config: DataConfig | None = None) -> CaptionData:
        """``splits`` of the run's data (:meth:`data_config` of ``overrides`` and ``dataset``, or ``data_config``
        when given), their captions encoded with the run's vocabulary (unknown words as ``<unk>``); features of
        other sizes than the run was trained on are refused (:func:`check_feature_dims`)."""
        config = data_config if data_config is not None else self.data_config(overrides, dataset)
        online = online_features(self.section, config, self.device) if self.section is not None else None
        data = load_data(config, tuple(splits), vocab=self.vocab, online=online)
        check_feature_dims(self.folder, self.config, data)
        for split in data.splits.values():  # a policy that reads its own tower's tokens: from that tower
            check_policy_fits(self.policy, split.features.encoder, str(config.features),
                              {"decode.max_len": self.decoding.max_len})
        share_image_side(self.policy, [split.features for split in data.splits.values()])  # (one copy of it)
        return data


def open_run(checkpoint: str | Path, device: str = "auto", value: bool = False, beam_size: int | None = None,
             max_len: int | None = None, length_penalty: float | None = None,
             no_repeat_ngram: int | None = None, precision: str | None = None) -> OpenRun:
    """The checkpoint folder ``checkpoint`` opened for inference, its models on ``device`` (auto: CUDA
    when torch sees it, else the CPU).

    The policy is built from its recorded spec (:func:`part_section`). ``value``: also the value network of an
    ``algorithm: ac`` checkpoint (what lookahead inference and
    ``rlcap diagnose value-fit`` read); a checkpoint without one is an :class:`RlcapError`. Decoding
    settings left as None are the run's own (:func:`checkpoint_decoding`), and so is ``precision`` (the run's
    ``precision``, which its validation decoded in: that score is what ``rlcap eval`` then reproduces). Building the models draws random
    initial weights before the checkpoint's replace them: the caller's random state is left as it was."""
    folder = Path(checkpoint)
    where = resolve_device(device, "--device")
    ckpt = load_checkpoint(folder, with_trainer=False)
    if value and VALUE not in ckpt.weights:
        raise RlcapError(f"{folder} holds no value network (part {VALUE!r}; it has {sorted(ckpt.weights)}): "
                         "lookahead inference and value-fit need a checkpoint of algorithm=ac")
    with torch.random.fork_rng(devices=[]):
        policy, section = _captioner(ckpt, folder, POLICY)
        value_net = _value_network(ckpt, folder) if value else None
    decoding = Decoding.of_run(checkpoint_decoding(ckpt.config, beam_size, max_len, length_penalty, no_repeat_ngram),
                               where)
    # (a config of a release before `precision` trained and validated in fp32)
    forward = Precision(precision or ckpt.config.get("precision", "fp32"), where.type)
    settle_aside(policy.to(where), where, [])  # (no data read yet: the online encoder's side is taken by data())
    return OpenRun(folder, policy, ckpt.vocab, ckpt.config, decoding, where,
                   value_net.to(where) if value_net is not None else None, forward, section)


def _captioner(ckpt: Checkpoint, folder: Path, name: str) -> tuple[torch.nn.Module, ModelConfig]:
    if name not in ckpt.weights:
        raise RlcapError(f"{folder} holds no part named {name!r}; it has {sorted(ckpt.weights)}")
    dims = ckpt.config["feature_dims"]
    section = part_section(ckpt, folder, name)
    model = build_model(section, len(ckpt.vocab), dims["fc"], dims["att"])
    load_weights(model, ckpt.weights[name], folder, name, saved=dataclasses.asdict(section))
    return model.eval(), section


def part_section(ckpt: Checkpoint, folder: Path, name: str) -> ModelConfig:
    """The model section captioner part ``name`` was built with: its recorded spec's architecture and settings
    (checkpoint.json's ``specs``), their paths found from the checkpoint as its architecture finds them
    (:meth:`~rlcap.models.architecture.Architecture.found_section`: an hf policy's own ``hf/``); for a checkpoint of a
    release that recorded no specs, its config's model section."""
    spec = ckpt.manifest.get("specs", {}).get(name, {})
    if "settings" not in spec:
        return from_dict(ModelConfig, ckpt.config["model"])
    recorded = {**ckpt.config, "model": {**spec["settings"], "arch": spec["family"]}}
    return from_dict(ModelConfig, architecture(spec["family"]).found_section(folder, recorded)["model"])


def _value_network(ckpt: Checkpoint, folder: Path) -> ValueModel:
    config, dims = ckpt.config, ckpt.config["feature_dims"]
    # the part's own spec says which network was trained (an older checkpoint's weights do)
    features = value_features(ckpt.manifest.get("specs", {}).get(VALUE), ckpt.weights[VALUE])
    value_net = build_value_model(from_dict(ModelConfig, config["model"]), len(ckpt.vocab), dims["fc"], dims["att"],
                                  features)
    load_weights(value_net, ckpt.weights[VALUE], folder, VALUE)
    return value_net.eval()


def checkpoint_decoding(config: dict[str, Any], beam_size: int | None = None, max_len: int | None = None,
                        length_penalty: float | None = None, no_repeat_ngram: int | None = None) -> DecodeSettings:
    """The run's own decoding settings (its config's ``decode`` section; the defaults for a config without
    one), with the values given here replacing them."""
    # a key of the section that is no DecodeSettings field (one the decoders choose by device) is left out
    known = {field.name for field in dataclasses.fields(DecodeSettings)}
    own = from_dict(DecodeSettings, {k: v for k, v in config.get("decode", {}).items() if k in known})
    given = {"beam_size": beam_size, "max_len": max_len, "length_penalty": length_penalty,
             "no_repeat_ngram": no_repeat_ngram}
    return from_dict(DecodeSettings, {**dataclasses.asdict(own), **{k: v for k, v in given.items() if v is not None}})


def checkpoint_data_config(checkpoint: str | Path, config: dict[str, Any],
                           overrides: list[str] | None = None) -> DataConfig:
    """The data section of a checkpoint's ``config`` as a DataConfig, with ``key=value`` overrides.

    The checkpoint's own paths (``dataset``, ``features``, ``coco_splits``) are relative to the
    checkpoint folder when its config says ``paths_relative_to: checkpoint`` (what training writes,
    so evaluation works from any directory); a config without that key holds paths relative to the
    working directory. Paths given as overrides are taken from the working directory. A path that does
    not exist is a :class:`DataError` naming the path tried.
    """
    data = dict(config["data"])
    relative_to = config.get("paths_relative_to")
    if relative_to not in (None, "checkpoint"):
        raise DataError(f"{checkpoint}: paths_relative_to is {relative_to!r}; expected 'checkpoint'")
    stored = {key: data[key] for key in DATA_PATHS if data.get(key)}
    if relative_to == "checkpoint":
        for key, value in stored.items():
            data[key] = os.path.normpath(Path(checkpoint).resolve() / value)
    data = apply_overrides(data, list(overrides or []))
    given = {item.split("=", 1)[0].strip() for item in overrides or []}
    for key in DATA_PATHS:
        path = data.get(key)
        if not path or Path(path).exists() or (key == "features" and Path(f"{path}_att").is_dir()):
            continue  # (a features path may name self-critical <prefix>_fc/_att folders by their prefix)
        if key in given:
            how = "as given"
        elif relative_to == "checkpoint":
            how = f"the checkpoint's {stored[key]!r}, relative to the checkpoint folder"
        else:
            how = f"the checkpoint's path, relative to the working directory {Path.cwd()}"
        raise DataError(f"data.{key}: {path} not found ({how}); pass data.{key}=PATH")
    return from_dict(DataConfig, data)


def check_feature_image_size(checkpoint: str | Path, config: dict[str, Any], features: str | Path) -> None:
    """:class:`DataError` when the store records another encoder input size than the checkpoint was
    trained on (its ``feature_dims.image_size``): such features run, but score far worse."""
    trained = config["feature_dims"]["image_size"]
    with open_feature_store(features) as store:
        stored = store.attrs.get("image_size")  # stores that record no size cannot be checked
    if trained is not None and stored is not None and int(trained) != int(stored):
        raise DataError(f"{checkpoint} was trained on features of {trained}-px images, but {features} holds "
                        f"features of {stored}-px images: pass data.features=FILE extracted with "
                        f"`rlcap features --image-size {trained}`")


def dataset_overrides(folder: str | Path) -> list[str]:
    """The data overrides that point a checkpoint at a folder built by ``rlcap data concepts``
    (its Karpathy split file and feature store); :class:`DataError` when the folder lacks them."""
    folder = Path(folder)
    for name in (DATASET_FILE, FEATURES_FILE):
        if not (folder / name).is_file():
            raise DataError(f"--dataset {folder}: no {name} there (build the folder with "
                            f"`rlcap data concepts --captions FILE --out {folder}`)")
    return [f"dataset={folder / DATASET_FILE}", f"features={folder / FEATURES_FILE}", "format=karpathy"]


def check_feature_dims(checkpoint: str | Path, config: dict[str, Any], data: CaptionData) -> None:
    """:class:`DataError` when the features' sizes are not those the checkpoint was trained on."""
    trained = config["feature_dims"]
    split = next(iter(data.splits.values()))
    if (split.fc_dim, split.att_dim) != (trained["fc"], trained["att"]):
        raise DataError(f"{checkpoint} was trained on {trained['fc']}-d pooled and {trained['att']}-d region "
                        f"features, but the data has {split.fc_dim}-d and {split.att_dim}-d ones: evaluate it "
                        "on features made like its training features")


def evaluation_record(checkpoint: str | Path, split: str, data: DataConfig,
                      run: OpenRun | None = None) -> dict[str, Any]:
    """What an evaluation's scores.json records of it, so that its folder is understood wherever it lies
    (``rlcap report``): the checkpoint, the split and the data section, its paths absolute; and how ``run``
    decoded (``decoding``: beam, lengths, length penalty, n-gram blocking, precision), which a model card's scores
    must match (:func:`rlcap.models.hf.model_card.add_scores`)."""
    section = {key: str(Path(value).resolve()) if key in DATA_PATHS and value else value
               for key, value in dataclasses.asdict(data).items()}
    record = {"checkpoint": str(Path(checkpoint).resolve()), "split": split, "data": section}
    if run is not None:
        dec = run.decoding
        record["decoding"] = {"beam_size": dec.beam_size, "max_len": dec.max_len, "length_penalty": dec.length_penalty,
                              "no_repeat_ngram": dec.no_repeat_ngram, "precision": run.precision.name}
    return record

"""A tiny captioning dataset with random features, for training, evaluation and CLI tests."""

import json
import random

import numpy as np

from rlcap.data.features import HDF5FeatureWriter

WORDS = ["a", "red", "blue", "green", "circle", "square", "triangle", "big", "small", "on", "left", "of"]


def make_tiny_dataset(folder, n_train=24, n_val=6, n_test=6, fc_dim=8, regions=4, seed=0, image_size=32):
    """Captions whose colour word is encoded in the features, so a model can learn something."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    images, ids, fcs, atts = [], [], [], []
    colours = ["red", "blue", "green"]
    for i in range(n_train + n_val + n_test):
        split = "train" if i < n_train else "val" if i < n_train + n_val else "test"
        colour = colours[i % 3]
        shape = rng.choice(["circle", "square", "triangle"])
        sentences = [{"raw": f"A {colour} {shape}.", "tokens": []},
                     {"raw": f"a {rng.choice(['big', 'small'])} {colour} {shape}", "tokens": []},
                     {"raw": f"{colour} {shape} on the left", "tokens": []}]
        images.append({"imgid": i, "filename": f"{i}.png", "split": split, "sentences": sentences})
        fc = nrng.normal(size=fc_dim).astype(np.float32)
        fc[i % 3] += 4.0
        ids.append(str(i))
        fcs.append(fc)
        atts.append(np.tile(fc, (regions, 1)) + nrng.normal(scale=0.1, size=(regions, fc_dim)).astype(np.float32))
    dataset = folder / "dataset.json"
    dataset.write_text(json.dumps({"dataset": "tiny", "images": images}))
    feats = folder / "feats.h5"
    with HDF5FeatureWriter(feats, fc_dim, fc_dim, regions, attrs={"image_size": image_size}) as writer:
        writer.write(ids, np.stack(fcs), np.stack(atts))
    return dataset, feats


def tiny_overrides(dataset, feats, out_dir, arch="fc", **extra):
    items = {
        "data.dataset": dataset, "data.features": feats, "data.min_count": 1, "data.seq_per_img": 2,
        "out_dir": out_dir, "model.arch": arch, "model.embed_dim": 16, "model.hidden_dim": 16,
        "model.att_hidden_dim": 16, "model.num_layers": 1, "model.num_heads": 2, "model.ff_dim": 32,
        "model.dropout": 0.1, "xe.epochs": 2, "xe.batch_size": 4, "decode.max_len": 6, "log_every": 1,
        "track.to": [], "threads": 1,
    }
    items.update(extra)
    return [f"{k}={v}" for k, v in items.items()]


def tiny_xe_run(folder, epochs=2):
    """The tiny dataset made in ``folder`` and an XE run on it: (dataset, feats, best checkpoint)."""
    from rlcap import api

    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe", **{"xe.epochs": epochs})))
    return dataset, feats, folder / "xe" / "best"


def make_tiny_clips(folder):
    """A tiny moving-shapes set (40 train, 8 val, 4 test clips) with 4-frame features of random vectors
    (what [Wang18]'s internal critic reads is words): (annotations, features)."""
    from rlcap.data.synthetic.moving import MovingShapesConfig, generate_moving_shapes

    ann = generate_moving_shapes(MovingShapesConfig(n_train=40, n_val=8, n_test=4, workers=1), folder / "ms")
    ids = [v["video_id"] for v in json.loads(ann.read_text())["videos"]]
    rng = np.random.default_rng(0)
    with HDF5FeatureWriter(folder / "f.h5", 8, 8, 4) as writer:
        writer.write(ids, rng.normal(size=(len(ids), 8)).astype("float32"),
                     rng.normal(size=(len(ids), 4, 8)).astype("float32"))
    return ann, folder / "f.h5"


def hrl_overrides(ann, feats, out, **extra):
    """tiny_overrides sized for [Wang18]'s HRL captioner and the tiny clips' 18-20-word captions."""
    return tiny_overrides(ann, feats, out, **{"model.embed_dim": 16, "model.hidden_dim": 16, "model.manager_dim": 8,
                                              "model.goal_dim": 4, "decode.max_len": 24, "data.max_len": 24, **extra})


def hrl_settings(folder, **extra):
    """Algorithm 1 (algorithm=hrl) from the HRL XE checkpoint ``folder/hrl/best``: short phases, 2 epochs."""
    return {"algorithm": "hrl", "init_from": folder / "hrl" / "best", "rl.epochs": 2, "rl.batch_size": 8,
            "hrl.switch_every": 2, "optim.lr": 0.001, "val.max_images": 4, **extra}


def tiny_hrl_xe(folder, ann, feats, **extra):
    """An internal critic (one epoch) in ``folder/critic`` and an HRL captioner warm-started by XE
    with it frozen inside in ``folder/hrl`` (``extra``: overrides of both runs)."""
    from rlcap import api

    api.train(api.load_run_config(None, hrl_overrides(ann, feats, folder / "critic", **{
        "algorithm": "critic", "critic.epochs": 1, "critic.batch_size": 16, **extra})))
    api.train(api.load_run_config(None, hrl_overrides(ann, feats, folder / "hrl", **{
        "model.arch": "hrl", "model.critic_from": folder / "critic" / "best", "xe.epochs": 1, "xe.batch_size": 8,
        **extra})))
    return folder / "hrl" / "best"

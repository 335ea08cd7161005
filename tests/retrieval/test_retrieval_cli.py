"""rlcap's dual encoder as a retriever: `rlcap retrieval train` (InfoNCE) and `rlcap retrieval eval`."""

import json
import re

import yaml

from rlcap.cli import main
from rlcap.data.loader import DataConfig, load_data
from rlcap.models.embedding import load_embedding_model
from rlcap.methods.embedding import retrieval_scores
from tests.tiny import make_tiny_dataset, tiny_overrides


def test_retrieval_train_then_eval(tmp_path, capsys):
    dataset, feats = make_tiny_dataset(tmp_path, n_train=48, n_test=12)
    recipe = tmp_path / "retrieval.yaml"
    recipe.write_text(yaml.safe_dump({"retriever": {"epochs": 4, "batch_size": 12, "temperature": 0.1,
                                                    "model": {"word_dim": 8, "hidden_dim": 8, "joint_dim": 8}},
                                      "optim": {"lr": 0.01}}))
    overrides = [o for o in tiny_overrides(dataset, feats, tmp_path / "ret") if not o.startswith(("xe.", "model."))]
    assert main(["retrieval", "train", str(recipe), *overrides]) == 0
    config = json.loads((tmp_path / "ret" / "config.json").read_text())
    assert config["algorithm"] == "retriever" and config["retriever"]["loss"] == "infonce"
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "ret" / "log.jsonl").read_text().splitlines())
              if r.get("split") == "train"]
    assert sum(losses[-4:]) < sum(losses[:4])  # the contrastive loss falls

    capsys.readouterr()
    assert main(["retrieval", "eval", str(tmp_path / "ret" / "best"), "--split", "test"]) == 0
    out = capsys.readouterr().out
    printed = [float(x) for x in re.findall(r"R@1\s+([\d.]+)", out)]
    model, vocab = load_embedding_model(tmp_path / "ret" / "best")
    data_cfg = DataConfig(dataset=str(dataset), features=str(feats), min_count=1)
    scores = retrieval_scores(model, load_data(data_cfg, ("test",), vocab=vocab).splits["test"])
    assert printed == [round(scores["t2i_R@1"], 1), round(scores["i2t_R@1"], 1)]
    # the colour is in the features: a caption finds an image of its colour far above chance (1 in 12)
    assert scores["t2i_R@5"] > 100 * 5 / 12

    # the command's options: resume=true continues the run with a changed setting; nproc= is rlcap train's
    steps = len((tmp_path / "ret" / "log.jsonl").read_text().splitlines())
    assert main(["retrieval", "train", str(recipe), *overrides, "retriever.epochs=5", "resume=true"]) == 0
    assert json.loads((tmp_path / "ret" / "config.json").read_text())["retriever"]["epochs"] == 5
    assert len((tmp_path / "ret" / "log.jsonl").read_text().splitlines()) > steps  # a fifth epoch, appended
    capsys.readouterr()
    assert main(["retrieval", "train", str(recipe), *overrides, "nproc=2"]) == 2
    assert "nproc: rlcap retrieval train runs one process" in capsys.readouterr().err

"""Settings a run sets are the run's, defaults or not (issue 55, Why 6): a run from a LoRA checkpoint that sets
``model.train=all`` or ``model.lora_rank=8`` (both the defaults) trains all weights, or rank-8 adapters, starting
from the function the checkpoint computes (its adapters merged into the weights: W + (alpha / r) B A). For each
family whose linear maps differ: GPT-2's Conv1D (weights stored in x out) and GIT's nn.Linear."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from rlcap.cli import main
from rlcap.methods import load_run_config
from rlcap.run_config import RunConfig
from rlcap.train.checkpoint import load_checkpoint
from tests.conftest import REPO
from tests.models.hf_captioners import captioner_with_store
from tests.tiny import tiny_overrides

pytest.importorskip("transformers")
pytest.importorskip("peft")

XE = str(REPO / "configs" / "shapes_xe.yaml")


@pytest.fixture(scope="module", params=["vision_encoder_decoder", "git"])
def lora_run(request, tmp_path_factory):
    """An XE run of a tiny captioner, then LoRA adapters of rank 4 trained from it: (command maker, LoRA checkpoint)."""
    folder = tmp_path_factory.mktemp(request.param)
    dataset, model, store = captioner_with_store(request.param, folder)

    def command(out: str, *extra: str, **items) -> list[str]:
        overrides = [o for o in tiny_overrides(dataset, store, folder / out, **{"xe.epochs": 1, **items})
                     if not o.startswith("model.")]
        return ["train", XE, *overrides, *extra]

    assert main(command("xe", "model.arch=hf", f"model.path={model}", **{"optim.lr": 0.003})) == 0
    assert main(command("lora", f"init_from={folder / 'xe' / 'best'}", "model.train=lora", "model.lora_rank=4",
                        **{"optim.lr": 0.01})) == 0

    def run(out: str, *extra: str) -> dict:
        """One step of 1e-6 from the LoRA checkpoint: its config.json, last checkpoint's policy and greedy captions."""
        assert main(command(out, f"init_from={folder / 'lora' / 'last'}", *extra, **{"max_steps": 1,
                                                                                    "optim.lr": 1e-6})) == 0
        weights = load_checkpoint(folder / out / "last", with_trainer=False).weights["policy"]
        return {"config": json.loads((folder / out / "config.json").read_text()), "weights": weights,
                "captions": _greedy(folder / out / "last")}

    return command, run, folder / "lora" / "last"


def _greedy(checkpoint) -> dict[str, str]:
    assert main(["eval", str(checkpoint), "--beam-size", "1"]) == 0
    return {str(p["image_id"]): p["caption"]
            for p in json.loads((checkpoint / "eval_test" / "predictions.json").read_text())}


def _ranks(weights: dict[str, torch.Tensor]) -> set[int]:
    return {int(t.shape[0]) for k, t in weights.items() if k.endswith(".lora_A.default.weight")}


def test_model_train_all_from_a_lora_checkpoint_trains_every_weight_from_its_merged_function(lora_run):
    _, run, lora = lora_run
    assert _ranks(load_checkpoint(lora, with_trainer=False).weights["policy"]) == {4}
    same = run("same")  # the checkpoint continued as it is: LoRA rank 4
    assert same["config"]["model"]["train"] == "lora" and _ranks(same["weights"]) == {4}
    full = run("all", "model.train=all")  # model.train's default, set on the command line
    assert full["config"]["model"]["train"] == "all"
    assert not any(".lora_" in k for k in full["weights"])
    # one step from the merged weights moved the embeddings and output layer too, which LoRA never trains
    from rlcap.eval.open_run import open_run

    merged = {f"model.{k}": v for k, v in open_run(lora, device="cpu").policy.weights.merged_state().items()}
    changed = {k for k, v in full["weights"].items() if not torch.equal(v, merged[k])}
    assert any("embed" in k or "wte" in k for k in changed) and any(".lora_" not in k for k in changed), changed
    # ... and it started from the function the checkpoint computes: one tiny step on, the same greedy captions
    assert full["captions"] == _greedy(lora) == same["captions"] and len(full["captions"]) == 6
    assert any(full["captions"].values())


def test_the_merged_start_is_peft_s_own_merge(lora_run):
    """The weights a model.train=all run loads from a LoRA checkpoint are those peft merges into its hf/ export."""
    from rlcap.eval.open_run import open_run
    from rlcap.train.session import open_session

    command, _, lora = lora_run
    argv = command("unused", f"init_from={lora}", "model.train=all")
    session = open_session(load_run_config(argv[1], argv[2:]))
    loaded = session.model.state_dict()
    merged = {f"model.{k}": v for k, v in open_run(lora, device="cpu").policy.weights.merged_state().items()}
    assert set(loaded) <= set(merged)
    worst = max(float((loaded[k] - merged[k]).detach().abs().max()) for k in loaded)
    assert worst < 1e-6, worst


def test_model_lora_rank_8_from_a_rank_4_checkpoint_is_rank_8(lora_run):
    """8 is the default rank: set on the command line, it is the run's all the same."""
    _, run, lora = lora_run
    ranked = run("rank8", "model.lora_rank=8")
    assert (ranked["config"]["model"]["train"], ranked["config"]["model"]["lora_rank"]) == ("lora", 8)
    assert _ranks(ranked["weights"]) == {8}
    assert ranked["captions"] == _greedy(lora)  # from the checkpoint's function (the new adapters: B = 0)


def test_the_keys_a_recipe_and_overrides_set_are_recorded():
    """load_run_config records them (a deep copy keeps them); a config built in Python counts what differs from
    the defaults."""
    cfg = load_run_config(XE, ["model.train=all", "optim.lr=0.001"])
    assert cfg.sets("model.train") and cfg.sets("optim.lr") and not cfg.sets("model.lora_rank")
    assert cfg.sets("xe.epochs")  # the recipe's
    assert copy.deepcopy(cfg).set_keys == cfg.set_keys
    built = RunConfig()
    assert built.set_keys is None and not built.sets("model.train") and not built.sets("optim.lr")
    built.optim.lr = 0.001
    assert built.sets("optim.lr")


def test_lora_weights_without_their_model_section_are_refused_in_one_line(lora_run):
    """Their scale (alpha / r) is in the config of the run that saved them, not in the weights."""
    from rlcap.errors import RlcapError
    from rlcap.models.hf.captioner import HFCaptioner

    _, _, lora = lora_run
    weights = load_checkpoint(lora, with_trainer=False).weights["policy"]
    with pytest.raises(RlcapError) as err:
        HFCaptioner(lora.parent.parent / "captioner").load_state_dict(weights)
    assert str(err.value) == ("these weights hold LoRA adapters of rank 4, but not the model section of the "
                              "model.train=lora run that saved them (its lora_alpha scales them): load them through "
                              "their checkpoint (init_from=CHECKPOINT)")

"""`rlcap train --help-config` lists the keys a run reads, and only those: a `datasets` dataset's column keys only
for a run whose data is one (and data.coco_splits then not), rl.micro_batch only for a policy sampled without
autograd and scored in one pass (model.arch=hf)."""

from __future__ import annotations

import pytest

from tests.cli.in_process import run_cli

COLUMNS = {"data.image_column", "data.caption_column", "data.id_column", "data.split_column"}


def _listed(capsys, *argv: str) -> list[str]:
    """The keys `--help-config` lists for ``argv``, up to its count line (whose number is checked too)."""
    rc, out, err = run_cli(capsys, "train", "--help-config", *argv)
    assert rc == 0, err
    lines = out.splitlines()
    keys = [line.split()[0] for line in lines[1:lines.index("")]]
    assert lines[lines.index("") + 1].startswith(f"{len(keys)} keys")
    return keys


def test_scst_on_shapes_lists_neither_the_column_keys_nor_micro_batch(capsys):
    """A Karpathy JSON and an UpDown policy (the shapes recipe): none of the five keys; they are named among those
    not shown, with what would make a run read them."""
    keys = _listed(capsys, "configs/shapes_scst.yaml")
    assert not COLUMNS & set(keys) and "rl.micro_batch" not in keys
    assert {"data.coco_splits", "rl.rollout_dropout", "rl.kl_coef", "scst.baseline"} <= set(keys)
    rc, out, _ = run_cli(capsys, "train", "--help-config", "configs/shapes_scst.yaml")
    assert rc == 0
    unread = out.split("not shown, as this run does not read them: ")[1]
    assert "data.split_column" in unread and "rl.micro_batch" in unread and "data.format or data.dataset" in unread


def test_scst_on_the_default_recipe_lists_the_last_releases_keys_and_the_kl_term(capsys):
    """``algorithm=scst`` alone: 59 keys, the 45 of the release before the `datasets` columns and rl.micro_batch
    were added, rl.kl_coef (the KL term every sampling method reads, added with them), then the trackers' eight
    (track.*, in place of tensorboard), data.images (a store-less run's pictures), distributed.strategy,
    reward.length_mask, host_memory, distributed.decode_weights and data.workers (a store-less run's processes)."""
    keys = _listed(capsys, "algorithm=scst")
    assert len(keys) == 59
    assert {"track.to", "track.captions", "data.images", "distributed.strategy", "reward.length_mask",
            "host_memory", "distributed.decode_weights", "data.workers"} <= set(keys)
    assert "tensorboard" not in keys
    assert not COLUMNS & set(keys) and "rl.micro_batch" not in keys and "rl.kl_coef" in keys


@pytest.mark.parametrize("how", ["auto", "hf"])
def test_a_datasets_run_lists_the_column_keys_and_not_coco_splits(tmp_path, capsys, how):
    """A folder in a `datasets` layout (an image folder with its metadata.jsonl) found by ``data.format: auto``,
    or any dataset named ``data.format=hf``: the four column keys, and no data.coco_splits (COCO annotations
    only)."""
    folder = tmp_path / "pictures"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "metadata.jsonl").write_text('{"file_name": "0.png", "caption": "a red circle"}\n')
    data = [f"data.dataset={folder}"] if how == "auto" else ["data.dataset=elsewhere", "data.format=hf"]
    keys = _listed(capsys, "algorithm=scst", *data)
    assert COLUMNS <= set(keys) and "data.coco_splits" not in keys
    assert len(keys) == 59 + len(COLUMNS) - 1


def test_coco_splits_is_listed_only_where_it_can_make_the_file_coco(tmp_path, capsys):
    assert "data.coco_splits" in _listed(capsys, "algorithm=xe", "data.format=coco")
    for data in (["data.dataset=captions.jsonl"], ["data.format=karpathy"], ["data.format=msrvtt"]):
        keys = _listed(capsys, "algorithm=xe", *data)
        assert "data.coco_splits" not in keys and not COLUMNS & set(keys), data


@pytest.mark.parametrize("recipe", ["configs/coco_vlm_scst.yaml", "configs/coco_vlm_grpo.yaml"])
def test_an_hf_policy_scored_in_one_pass_lists_micro_batch(capsys, recipe):
    """A transformers policy (model.arch=hf) is sampled without autograd and scored in one teacher-forced pass,
    whose rows rl.micro_batch splits: listed for it, and not for the same method on an UpDown policy."""
    assert "rl.micro_batch" in _listed(capsys, recipe)
    algorithm = "grpo" if "grpo" in recipe else "scst"
    assert "rl.micro_batch" not in _listed(capsys, f"algorithm={algorithm}", "model.arch=updown")

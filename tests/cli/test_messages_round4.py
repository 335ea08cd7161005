"""The fourth probe's findings about settings, through the CLI as it saw them: what ``data.max_len`` counts
and cuts in an hf run (and ``--help-config`` saying so), a YAML mapping written without a space after its
colon, and the settings a release removed."""

from __future__ import annotations

import json
import logging

import pytest

from rlcap.cli import main
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides
from tests.cli.in_process import run_cli

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_data(tmp_path_factory):
    """A tiny GIT whose tokenizer (40 subwords) splits the tiny captions' 3-5 words into 9-20 subwords, and the
    store `rlcap features --encoder hf:` writes for it: (folder, dataset, model, store)."""
    from rlcap.models.hf.build_captioner import build_captioner

    folder = tmp_path_factory.mktemp("round4_max_len")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    model = build_captioner("git", folder / "git", captions, size="tiny", tokenizer="wordpiece", vocab_size=40)
    store = folder / "git.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0
    return folder, dataset, model, store


def _listing(capsys, *overrides) -> dict[str, str]:
    rc, out, _ = run_cli(capsys, "train", "--help-config", "algorithm=xe", *overrides)
    assert rc == 0
    rows = [line.split(None, 2) for line in out.splitlines() if line[:1].isalpha() and "." in line.split(" ")[0]]
    return {row[0]: row[-1] for row in rows if len(row) == 3}


def test_help_config_of_an_hf_run_says_subwords_and_leaves_out_what_it_does_not_read(hf_data, capsys):
    """An hf run's vocabulary is its tokenizer: data.max_len and decode.max_len count its subwords, and
    data.min_count (a word count for rlcap's own vocabulary) is not read."""
    _, _, model, _ = hf_data
    hf = _listing(capsys, "model.arch=hf", f"model.path={model}")
    assert "subwords" in hf["data.max_len"] and "words" not in hf["data.max_len"].replace("subwords", "")
    assert "subwords" in hf["decode.max_len"]
    assert "data.min_count" not in hf and "model.hidden_dim" not in hf and "model.dropout" not in hf
    own = _listing(capsys, "model.arch=updown")
    assert "data.min_count" in own and "subwords" not in own["decode.max_len"]
    assert "words, or the model's subwords for model.arch=hf" in own["data.max_len"]


def test_an_hf_run_refuses_a_max_len_that_cuts_most_captions_and_logs_what_it_cuts(hf_data, capsys, caplog):
    """`data.max_len=3` trained rc 0 on captions of 9-20 subwords, every one cut mid-word; 18 cuts a few."""
    folder, dataset, model, store = hf_data
    run = folder / "run"

    def train(max_len: int):
        return run_cli(capsys, "train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, run, **{
            "model.arch": "hf", "model.path": model, "data.max_len": max_len, "xe.epochs": 1, "max_steps": 1}))

    rc, _, err = train(3)
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("rlcap train: error: data.max_len=3 cuts 72 of 72 training captions (longest 20 "
                          "subwords): more than half"), err
    assert err.rstrip().endswith("give data.max_len=19 (keeps 90% of them whole) or 20 (keeps them all)"), err
    with caplog.at_level(logging.INFO, logger="rlcap.data.loader"):
        rc, _, err = train(18)  # the refused run left nothing that blocks this one in its folder
    assert rc == 0, err
    assert "data.max_len=18 cuts 10 of 72 training captions (longest 20 subwords)" in caplog.text


@pytest.mark.parametrize("override, key", [("reward.paths={retrieval:x}", "reward.paths"),
                                           ("reward.weights={cider:1}", "reward.weights")])
def test_a_mapping_without_a_space_after_its_colon_says_what_yaml_read(tmp_path, capsys, override, key):
    """YAML reads {retrieval:x} as the key "retrieval:x" with no value: the message was "expected str, got None"."""
    name, value = override.split("=", 1)[1].strip("{}").split(":")
    rc, _, err = run_cli(capsys, "train", "configs/shapes_scst.yaml", f"out_dir={tmp_path / 'run'}", override)
    assert rc == 2 and err.count("\n") == 1, err
    assert err.rstrip() == (f"rlcap train: error: {key}: YAML reads {{{name}:{value}}} as one key '{name}:{value}' "
                            f"without a value, as it needs a space after the colon: write {{{name}: {value}}} "
                            f"({key}={{{name}: {value}}} on the command line)")


@pytest.mark.parametrize("override, replaced_by", [
    ("decode.compile=true", "the Python decoders' compile=True compiles on the CPU too"),
    ("decode.exit_every=0", "the Python decoders' exit_every=N checks every N words"),
    ("reward.device=cuda", "a run on CUDA scores CIDEr-D on the GPU"),
])
def test_a_removed_setting_says_it_was_removed_and_what_replaced_it(tmp_path, capsys, override, replaced_by):
    """They read as typos ("unknown config key"), though the last release documented them."""
    key = override.split("=")[0]
    rc, _, err = run_cli(capsys, "train", "configs/shapes_scst.yaml", f"out_dir={tmp_path / 'run'}", override)
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"rlcap train: error: {key} was removed: ") and replaced_by in err, err
    assert "unknown config key" not in err and err.rstrip().endswith("remove it from the recipe or the command")

"""Methods are registered, not wired in: a method from a test file (its own loop and config section)
parses, lists its keys, trains and resumes exactly after SIGKILL without a line of src/ changed; a
run parses only its own method's sections."""

import logging
import os
import signal
import subprocess
import sys

import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.errors import ConfigError
from rlcap.methods import registry
from tests.methods import toy_method
from tests.train.killing import REPO, train_losses, wait_for_step
from tests.tiny import tiny_xe_run

TOY_RECIPE = REPO / "tests" / "methods" / "data" / "toy.yaml"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(registry.METHODS, "toy", toy_method.TOY)


@pytest.fixture(scope="module")
def xe(tmp_path_factory):
    return tiny_xe_run(tmp_path_factory.mktemp("toy"))


def _toy(dataset, feats, init, *extra):
    from tests.tiny import tiny_overrides

    return [o for o in tiny_overrides(dataset, feats, "unused") if not o.startswith(("model.", "out_dir"))] + [
        f"init_from={init}", *extra]


def test_a_method_from_a_test_file_has_its_own_section(toy, capsys):
    cfg = api.load_run_config(None, ["algorithm=toy", "toy.baseline=0.25"])
    assert cfg.toy.baseline == 0.25 and cfg.rl.n_samples == 5
    with pytest.raises(ConfigError, match="toy.baseline: expected >= 0, got -1"):
        api.load_run_config(None, ["algorithm=toy", "toy.baseline=-1"])
    assert main(["train", "--help-config", "algorithm=toy"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line and " " in line]
    assert "toy.baseline" in keys and "rl.n_samples" in keys and not any(k.startswith("scst.") for k in keys)


def test_a_method_from_a_test_file_trains_and_resumes_after_sigkill(xe, tmp_path):
    dataset, feats, init = xe
    overrides = _toy(dataset, feats, init)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    toy_method.use_toy()
    try:
        api.train(api.load_run_config(TOY_RECIPE, [*overrides, f"out_dir={reference}"]))
    finally:
        del registry.METHODS["toy"]
    ref = train_losses(reference)
    assert max(ref) == 12  # 24 images, 4 a batch, 2 epochs
    # the child process registers the toy method itself (python -m tests.methods.toy_method train ...)
    argv = [sys.executable, "-m", "tests.methods.toy_method", "train", str(TOY_RECIPE), *overrides, f"out_dir={killed}"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stopped_at = wait_for_step(proc, killed, 5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 5 <= stopped_at < 12
    done = subprocess.run([*argv, "resume=true"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = train_losses(killed)
    assert sorted(got) == sorted(ref) and [got[s] for s in ref if s > stopped_at] == [ref[s] for s in ref
                                                                                        if s > stopped_at]


def test_a_run_parses_only_its_methods_sections(caplog):
    with caplog.at_level(logging.WARNING, logger="rlcap.methods.registry"):
        cfg = api.load_run_config(None, ["algorithm=scst", "xe.epochs=3", "hrl.gamma=0.5", "scst.baseline=none"])
    assert cfg.scst.baseline == "none" and not hasattr(cfg, "hrl") and not hasattr(cfg, "xe")
    assert [r.getMessage() for r in caplog.records] == ["algorithm=scst does not read the sections hrl, xe (left out)"]
    xe = api.load_run_config(None, ["xe.epochs=3"])
    assert xe.xe.epochs == 3 and not hasattr(xe, "rl")
    with pytest.raises(ConfigError, match="unknown config key hrll"):  # not a section of any method: a typo
        api.load_run_config(None, ["algorithm=scst", "hrll.gamma=0.5"])
    with pytest.raises(ConfigError, match=r"algorithm: 'nosuch' is not one of \['ac', 'critic'"):
        api.load_run_config(None, ["algorithm=nosuch"])


def test_keys_a_method_never_reads_are_named_and_not_listed(caplog, capsys):
    """RunConfig.UNREAD: a shared key the loop never reads is named in a warning when set, and --help-config leaves
    it out (the embedding builds no captioner, the critic only embed_dim and hidden_dim; xe samples nothing)."""
    with caplog.at_level(logging.WARNING, logger="rlcap.methods.registry"):
        api.load_run_config(None, ["algorithm=xe", "decode.temperature=0.5", "decode.beam_size=2"])
        api.load_run_config(None, ["algorithm=xe", "decode.temperature=0.5"], shared=True)  # bench --rl: silent
        for recipe in sorted((REPO / "configs").glob("*.yaml")):  # no recipe sets a key its method never reads
            api.load_run_config(recipe)
    assert [r.getMessage() for r in caplog.records] == [
        "algorithm=xe does not read decode.temperature (set, but without effect on this run)"]

    def listed(algorithm: str) -> list[str]:
        assert main(["train", "--help-config", f"algorithm={algorithm}"]) == 0
        return [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line[:1].isalpha()
                and " " in line and not line.startswith(("other methods", "algorithm="))]

    embedding, critic, xe = listed("embedding"), listed("critic"), listed("xe")
    assert not [k for k in embedding if k.startswith(("model.", "decode.")) or k == "val.metric"]
    assert {"embedding.epochs", "val.split", "val.max_images"} <= set(embedding)
    assert [k for k in critic if k.startswith(("model.", "val."))] == ["model.embed_dim", "model.hidden_dim", "val.split"]
    assert "decode.temperature" not in xe and "decode.beam_size" in xe


def test_help_config_lists_the_shared_keys_and_the_methods_own(capsys):
    assert main(["train", "--help-config", "algorithm=scst"]) == 0
    lines = capsys.readouterr().out.splitlines()
    keys = [line.split()[0] for line in lines[1:lines.index("")]]
    assert lines[0].startswith("algorithm=scst: self-critical sequence training")
    assert {"scst.baseline", "rl.n_samples", "optim.lr", "decode.beam_size"} <= set(keys)
    assert not [k for k in keys if k.split(".")[0] in ("xe", "hrl", "wtf_rl", "ac", "pg", "mixer", "critic")]


def _listed(capsys, *argv):
    assert main(["train", "--help-config", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split()[0] for line in lines[1:lines.index("")]]  # the keys, up to the count


def test_help_config_leaves_out_the_keys_a_run_does_not_read(capsys):
    scst = _listed(capsys, "algorithm=scst")  # a run from an XE checkpoint: its architecture and vocabulary
    assert not [k for k in scst if k.startswith("model.")] and "data.min_count" not in scst
    assert "allow_init_mismatch" in scst and "reward.retrieval_tau" not in scst and "reward.paths" not in scst
    # not the model's keys nor min_count, the retrieval keys, the captions' cut, the decay, the datasets columns
    # (no datasets dataset named) nor rl.micro_batch (not an hf policy): 46, and the trackers' 8 (track.*, in place
    # of tensorboard), data.images, distributed.strategy, reward.length_mask, host_memory,
    # distributed.decode_weights and data.workers
    assert len(scst) == 59
    assert not {"data.seq_per_img", "data.max_len", "scst.running_mean_decay"} & set(scst)
    assert main(["train", "--help-config", "algorithm=scst"]) == 0
    assert ("without init_from (from random weights) it also reads data.min_count, model.arch, model.embed_dim, "
            "model.hidden_dim, model.att_hidden_dim, model.dropout, model.grid_boxes;") in capsys.readouterr().out
    updown = _listed(capsys, "algorithm=xe")  # xe builds its model
    assert {"model.att_hidden_dim", "data.min_count"} <= set(updown) and "allow_init_mismatch" not in updown
    assert "model.num_heads" not in updown and "model.goal_dim" not in updown
    assert {"data.seq_per_img", "data.max_len"} <= set(_listed(capsys, "algorithm=xe"))
    assert "data.seq_per_img" not in _listed(capsys, "algorithm=mixer") and "data.max_len" in _listed(
        capsys, "algorithm=mixer")
    assert "scst.running_mean_decay" in _listed(capsys, "algorithm=scst", "scst.baseline=running_mean")
    transformer = _listed(capsys, "algorithm=xe", "model.arch=transformer")
    assert {"model.num_heads", "model.ff_dim"} <= set(transformer) and "model.embed_dim" not in transformer
    distinct = _listed(capsys, "algorithm=wtf_rl")
    assert {"reward.retrieval_tau", "reward.hard_negatives", "reward.paths"} <= set(distinct)
    assert "reward.paths" in _listed(capsys, "algorithm=ac", "reward.weights={cider_d: 1.0, embedding: 0.5}")


def test_overrides_shared_by_several_runs_are_left_out_quietly(caplog):
    """rlcap demo and rlcap bench give one list to several runs: what a run does not read is no warning."""
    with caplog.at_level(logging.WARNING, logger="rlcap.methods.registry"):
        cfg = api.load_run_config(None, ["xe.epochs=3", "rl.epochs=2"], shared=True)
    assert cfg.xe.epochs == 3 and not hasattr(cfg, "rl") and caplog.records == []


def test_architecture_md_shows_the_toy_method_as_it_is():
    """docs/ARCHITECTURE.md's worked example is the toy method's file, which the tests above register, train and
    resume after SIGKILL: the page cannot drift from code that runs."""
    source = (REPO / "tests" / "methods" / "toy_method.py").read_text(encoding="utf-8")
    method = source.split("# --- the method: docs/ARCHITECTURE.md shows it from here ---\n")[1].split("# --- to here")[0]
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert f"```python\n{method.strip()}\n```" in page

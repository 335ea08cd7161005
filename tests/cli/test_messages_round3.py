"""The third probe's findings, through the CLI as they were seen: a feature store changed under an
out-of-core run, a bad validation row read out of core, a diverging run, tracebacks turned into one
line, and messages that said what the command does not take."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from rlcap.train.checkpoint import is_complete, load_checkpoint
from rlcap.train.logger import read_log
from tests.mounts import CAN_MOUNT, NO_MOUNT, tmpfs
from tests.tiny import make_tiny_dataset, tiny_overrides
from tests.cli.in_process import run_cli

mounts = pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)


def _train_steps(run) -> list[int]:
    return [r["step"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]


# --- a store changed under a run, a bad validation row out of core ---------------------------------

def test_a_store_truncated_under_an_out_of_core_run_stops_it_in_one_line(tmp_path, capsys, monkeypatch):
    """h5py reads the rows of a truncated file as zeros, which pass the finite check: the run went on,
    its log different from step 42, and "finished" with rc 0."""
    import rlcap.methods.xe as xe

    dataset, feats = make_tiny_dataset(tmp_path)
    real_finish = xe.finish_step

    def truncate_after_step_8(s, values):
        stop = real_finish(s, values)
        if s.progress.step == 8:  # in epoch 2, its first epoch's checkpoint written
            os.truncate(feats, feats.stat().st_size // 2)
        return stop

    monkeypatch.setattr(xe, "finish_step", truncate_after_step_8)
    run = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml",
                      *tiny_overrides(dataset, feats, run, **{"data.in_memory": "false", "xe.epochs": 4}))
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"rlcap train: error: {feats} changed while this run was reading it (")
    assert "the run stops here, its last checkpoint kept" in err and "run the same command again" in err
    assert is_complete(run / "last") and load_checkpoint(run / "last", with_trainer=False).manifest["step"] == 6
    assert max(_train_steps(run)) < 12  # stopped within the next read-ahead, not at the run's end (24 steps)


def test_a_non_finite_validation_row_out_of_core_is_found_before_the_first_step(tmp_path, capsys):
    """Out of core it was found at the end-of-epoch validation, before last/ was written: the epoch lost."""
    dataset, feats = make_tiny_dataset(tmp_path)
    with h5py.File(feats, "r+") as f:
        row = list(f["ids"].asstr()[()]).index("27")  # a validation image (24 train, then 6 val)
        f["fc"][row] = np.full(f["fc"].shape[1], np.nan, dtype=f["fc"].dtype)
    run = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml",
                      *tiny_overrides(dataset, feats, run, **{"data.in_memory": "false"}))
    assert (rc, err) == (2, f"rlcap train: error: {feats}: the features of image '27' are not finite (NaN or inf): "
                            "re-extract them (rlcap features)\n")
    assert not (run / "log.jsonl").exists() or _train_steps(run) == []


# --- recipes checked as the command line is; a diverging run ----------------------------------------

@pytest.mark.parametrize("value, shown", [(".nan", "expected a finite number, got nan"),
                                          (".inf", "expected a finite number, got inf"),
                                          ("1e30", "expected a learning rate in (0, 1], got 1e+30")])
def test_a_recipe_gets_the_range_checks_of_the_command_line(tmp_path, capsys, value, shown):
    """`optim: {lr: .nan}` in a recipe was accepted (and trained NaN) while optim.lr=nan was refused."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"algorithm: xe\noptim:\n  lr: {value}\n")
    rc, _, err = run_cli(capsys, "train", str(recipe), f"out_dir={tmp_path / 'run'}")
    assert (rc, err) == (2, f"rlcap train: error: optim.lr: {shown}\n")
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml", f"optim.lr={value}", f"out_dir={tmp_path / 'run'}")
    assert (rc, err) == (2, f"rlcap train: error: optim.lr: {shown}\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key", ["ac.value_lr", "pg.baseline_lr", "mixer.baseline_lr", "hrl.baseline_lr",
                                 "wtf_rl.discriminator_lr"])
def test_every_learning_rate_is_checked_alike(capsys, key):
    algorithm = key.split(".")[0]
    rc, _, err = run_cli(capsys, "train", "--help-config", f"algorithm={algorithm}", f"{key}=5")
    assert (rc, err) == (2, f"rlcap train: error: {key}: expected a learning rate in (0, 1], got 5\n")


def test_a_diverging_run_stops_in_one_line_with_what_to_try(tmp_path, capsys, monkeypatch):
    """Once `FloatingPointError: xe loss became nan at step 2`, a traceback."""
    import rlcap.methods.xe as xe

    dataset, feats = make_tiny_dataset(tmp_path)
    real_step = xe.xe_step
    monkeypatch.setattr(xe, "xe_step", lambda s, *a: float("nan") if s.progress.step == 2 else real_step(s, *a))
    run = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml",
                      *tiny_overrides(dataset, feats, run, **{"save_every": 1, "optim.lr": 0.3}))
    assert (rc, err) == (2, f"rlcap train: error: the xe loss became nan at step 3: the run diverged and stops; its "
                            f"last checkpoint is step 2 in {run / 'last'}. Try a lower optim.lr (this run: 0.3) or "
                            "optim.grad_clip (this run: 2, 0: none), then the same command with resume=true "
                            "continues from that checkpoint\n")
    assert is_complete(run / "last")


# --- tracebacks of unwritable folders, one line each, nothing half-written left -------------------

@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    """The tiny dataset and a retriever trained on it for one epoch."""
    from rlcap import api

    folder = tmp_path_factory.mktemp("retriever")
    dataset, feats = make_tiny_dataset(folder)
    small = {"retriever.epochs": 1, "retriever.batch_size": 8, "retriever.model.word_dim": 8,
             "retriever.model.hidden_dim": 8, "retriever.model.joint_dim": 8}
    api.train(api.load_run_config("configs/shapes_retrieval.yaml", tiny_overrides(dataset, feats, folder / "r", **small)))
    return dataset, feats, folder / "r" / "best"


def _full(folder):
    """A 64 kB tmpfs with no byte left."""
    mount = tmpfs(folder, size="64k")
    root = mount.__enter__()
    with open(root / "fill", "wb") as f:
        try:
            f.write(b"\0" * 65536 * 2)
        except OSError:
            pass
    return mount, root


@mounts
def test_retrieval_index_into_a_read_only_or_full_folder(retriever, tmp_path, capsys, monkeypatch):
    """Once a traceback from h5py after every image was embedded, with a 0-byte bank.h5.tmp left."""
    from rlcap.rewards import image_bank

    dataset, feats, best = retriever
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        rc, _, err = run_cli(capsys, "retrieval", "index", str(best), "--dataset", str(dataset), "--features",
                          str(feats), "--out", str(ro / "bank.h5"))
    assert (rc, err) == (2, f"rlcap retrieval: error: cannot write {ro / 'bank.h5'}: read-only file system\n")
    built = []
    real_build = image_bank.build_image_bank
    monkeypatch.setattr(image_bank, "build_image_bank", lambda *a, **k: built.append(1) or real_build(*a, **k))
    with tmpfs(tmp_path / "small", size="64k") as room:
        (room / "fill").write_bytes(b"\0" * 60 * 1024)  # room for the check's empty probe, not for the bank
        rc, _, err = run_cli(capsys, "retrieval", "index", str(best), "--dataset", str(dataset), "--features",
                          str(feats), "--out", str(room / "bank.h5"), "--neighbours", "2")
        left = sorted(p.name for p in room.iterdir())
    assert (rc, err) == (2, f"rlcap retrieval: error: cannot write {room / 'bank.h5'}: no space left on device\n")
    assert left == ["fill"] and built == [1]  # the bank was built, then could not be written: no .tmp left


@mounts
def test_data_concepts_into_a_read_only_folder_before_the_tagging(tmp_path, capsys, monkeypatch):
    import json

    from rlcap.data.concepts import build

    captions = tmp_path / "caps.json"
    captions.write_text(json.dumps({str(i): [f"a red dog {i}", "the dog runs", "a dog"] for i in range(20)}))
    monkeypatch.setattr(build, "extract_concepts", lambda *a: (_ for _ in ()).throw(AssertionError("tagged")))
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        rc, _, err = run_cli(capsys, "data", "concepts", "--captions", str(captions), "--out", str(ro / "c"),
                          "--n-val", "2", "--n-test", "2")
    assert (rc, err) == (2, f"rlcap data: error: cannot write {ro / 'c'}: read-only file system\n")


@mounts
def test_a_lock_on_a_full_disk_is_one_line_and_leaves_nothing(retriever, tmp_path, capsys):
    """The lock file of a run folder or a store could not record its holder (os.pwrite): a traceback, and
    an empty .lock (and the run folder) left."""
    from tests.encoders.conftest import write_images

    import json

    dataset, feats, _ = retriever
    write_images(tmp_path / "im", 2)
    captions = tmp_path / "caps.json"
    captions.write_text(json.dumps({str(i): [f"a red dog {i}", "the dog runs", "a dog"] for i in range(20)}))
    mount, full = _full(tmp_path / "full")
    try:
        commands = {
            "train": (["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, feats, full / "run")],
                      full / "run"),
            "retrieval": (["retrieval", "train", "configs/shapes_retrieval.yaml",
                           *tiny_overrides(dataset, feats, full / "ret")], full / "ret"),
            "features": (["features", str(tmp_path / "im"), "--out", str(full / "f.h5"), "--image-size", "64"], full),
            "data": (["data", "concepts", "--captions", str(captions), "--out", str(full / "c"), "--n-val", "2",
                      "--n-test", "2"], full / "c"),
        }
        for command, (argv, named) in commands.items():
            rc, _, err = run_cli(capsys, *argv)
            assert (rc, err) == (2, f"rlcap {command}: error: cannot write {named}: no space left on device\n")
            assert sorted(p.name for p in full.iterdir()) == ["fill"], command
    finally:
        mount.__exit__(None, None, None)


def test_a_refused_device_leaves_no_folder(tmp_path, capsys):
    dataset, feats = make_tiny_dataset(tmp_path)
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml",
                      *tiny_overrides(dataset, feats, tmp_path / "new" / "run", device="cuda:7"))
    assert rc == 2 and err.startswith("rlcap train: error: device: cuda:7 asked for")
    assert not (tmp_path / "new").exists()


# --- messages that say what the command really takes ------------------------------------------------

def test_nproc_in_a_recipe_says_how_to_start_several_processes(tmp_path, capsys):
    """It suggested api.train(cfg, nproc=True), which does not exist."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("algorithm: xe\nnproc: 2\n")
    rc, _, err = run_cli(capsys, "train", str(recipe))
    assert rc == 2 and "api.train(cfg, nproc" not in err
    assert err.startswith("rlcap train: error: nproc is not a setting of the run but an option of the command: "
                          "nproc=... on the rlcap train command line, or torchrun --nproc-per-node N -m rlcap "
                          "train RECIPE (api.train runs in the process that calls it)")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="says what a machine without CUDA says")
def test_the_device_message_names_the_option_the_command_takes(tiny_xe, tmp_path, capsys):
    """eval, caption, features and retrieval take --device: they said "give device=cpu"."""
    from tests.encoders.conftest import write_images

    _, _, best = tiny_xe(1)
    images = write_images(tmp_path / "im", 1)
    for argv in (["eval", str(best), "--device", "cuda"],
                 ["caption", str(best), str(images["img0"]), "--device", "cuda"],
                 ["features", str(tmp_path / "im"), "--out", str(tmp_path / "f.h5"), "--device", "cuda"]):
        rc, _, err = run_cli(capsys, *argv)
        assert rc == 2 and "sees no CUDA device; give --device cpu, or install a CUDA build" in err, (argv, err)
    dataset, feats = make_tiny_dataset(tmp_path)
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, feats, tmp_path / "r",
                                                                                 device="cuda"))
    assert rc == 2 and "give device=cpu, or install" in err  # a run's setting, given as key=value


@mounts
@pytest.mark.parametrize("command", ["demo", "bench"])
def test_demo_and_bench_check_their_output_folder_before_generating_data(tmp_path, capsys, command):
    """They generated the shapes data for many minutes, then failed on the read-only --out."""
    extra = ["--benchmark", "shapes", "--methods", "xe"] if command == "bench" else []
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        rc, _, err = run_cli(capsys, command, "--out", str(ro / "out"), "--data", str(tmp_path / "data"), *extra)
    assert (rc, err) == (2, f"rlcap {command}: error: cannot write {ro / 'out'}: read-only file system\n")
    assert not (tmp_path / "data").exists()


@mounts
def test_diagnose_checks_out_before_measuring(tiny_xe, tmp_path, capsys, monkeypatch):
    """It printed its whole table, then failed on --out."""
    from rlcap.diagnose import reward_spread

    _, _, best = tiny_xe(1)
    monkeypatch.setattr(reward_spread, "reward_spread", lambda *a, **k: pytest.fail("measured first"))
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        rc, out, err = run_cli(capsys, "diagnose", "reward-spread", str(best), "--out", str(ro / "x.json"))
    assert (rc, out, err) == (2, "", f"rlcap diagnose: error: cannot write {ro / 'x.json'}: read-only file system\n")


def test_diagnose_rewards_with_a_weight_that_is_not_a_number(capsys):
    """`cider_d:abc` was read as the dotted path of a module cider_d ("cannot import module cider_d")."""
    rc, _, err = run_cli(capsys, "diagnose", "reward-spread", "ckpt", "--rewards", "cider_d:abc")
    assert (rc, err) == (2, "rlcap diagnose reward-spread: error: argument --rewards: 'cider_d:abc': the weight "
                            "'abc' of cider_d is not a number (NAME:WEIGHT,... e.g. cider_d:0.5,spice:0.5) (see "
                            "rlcap diagnose reward-spread --help)\n")


def test_report_of_a_file(tmp_path, capsys):
    """It said it could not write FILE/report.html."""
    (tmp_path / "f.json").write_text("{}")
    rc, _, err = run_cli(capsys, "report", str(tmp_path / "f.json"))
    assert (rc, err) == (2, f"rlcap report: error: {tmp_path / 'f.json'}: not a folder; rlcap report reads a run "
                            "folder, a checkpoint folder, an evaluation folder (rlcap eval --out) or a bench folder "
                            "(rlcap bench --out)\n")


def test_features_stopped_by_sigterm_says_how_to_continue(tmp_path, capsys, monkeypatch):
    """It exited 143 without a word; the rows written are kept and the same command continues."""
    import signal

    import rlcap.cli.features as features
    from tests.encoders.conftest import write_images

    write_images(tmp_path / "im", 6)
    real = features.extract_features

    def stopped_after_a_batch(images, out, **kw):
        update = kw["progress"]

        def progress(n):
            update(n)
            os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's kill, delivered to this process

        return real(images, out, **{**kw, "progress": progress})

    monkeypatch.setattr(features, "extract_features", stopped_after_a_batch)
    out = tmp_path / "f.h5"
    argv = ["features", str(tmp_path / "im"), "--out", str(out), "--image-size", "64", "--batch-size", "2"]
    rc, _, err = run_cli(capsys, *argv)
    assert (rc, err.splitlines()[-1]) == (143, f"rlcap features: terminated; {out} keeps the 2 rows written before. "
                                               "Continue with the same command: the rows already there are not "
                                               "encoded again")
    monkeypatch.setattr(features, "extract_features", real)
    rc, out_text, _ = run_cli(capsys, *argv)
    assert rc == 0 and "encoded 4 images" in out_text and "2 already present" in out_text

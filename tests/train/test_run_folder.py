"""A run folder is never silently overwritten; settings are validated; bad checkpoints give one line
(issue 11: each test is one finding of its "Why")."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.errors import ConfigError
from rlcap.train.logger import read_log
from tests.train.killing import EMPTY, REPO, assert_resume_is_exact
from tests.tiny import make_tiny_dataset, tiny_overrides


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    dataset, feats = make_tiny_dataset(folder)
    return dataset, feats


def _cfg(tiny, out, *extra, **items):
    dataset, feats = tiny
    return api.load_run_config(None, [*tiny_overrides(dataset, feats, out, **items), *extra])


def test_rerunning_a_finished_run_keeps_it(tiny, tmp_path):
    """The same command again does not start from step 1, overwrite best/ or truncate the log."""
    run = tmp_path / "run"
    first = api.train(_cfg(tiny, run))
    best = (run / "best" / "policy.safetensors").read_bytes()
    log = (run / "log.jsonl").read_text()
    again = api.train(_cfg(tiny, run))
    assert again.steps == first.steps and again.best_score == first.best_score
    assert (run / "best" / "policy.safetensors").read_bytes() == best
    assert (run / "log.jsonl").read_text() == log


def test_the_same_command_after_a_kill_resumes(tiny, tmp_path):
    overrides = [*tiny_overrides(*tiny, tmp_path / "unused"), "xe.epochs=12", "save_every=2"]
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, 12 * 6, resume=False)


def test_other_settings_are_refused_naming_them_and_the_ways_on(tiny, tmp_path):
    run = tmp_path / "run"
    api.train(_cfg(tiny, run, "xe.epochs=1"))
    with pytest.raises(ConfigError) as err:
        api.train(_cfg(tiny, run, "xe.epochs=1", "optim.lr=0.01"))
    text = str(err.value)
    assert "optim.lr 0.0005 -> 0.01" in text and "resume=true" in text and "out_dir" in text and "overwrite=true" in text
    assert "\n" not in text


def test_a_setting_added_by_a_later_release_keeps_an_older_run_going(tiny, tmp_path):
    """A run written before a setting existed continues while the setting keeps its default; another value
    is a change like any other (the continued run has recorded the default)."""
    run = tmp_path / "run"
    first = api.train(_cfg(tiny, run, "xe.epochs=1"))
    stored = json.loads((run / "config.json").read_text())
    del stored["data"]["train_captions"]  # as an older release wrote it
    (run / "config.json").write_text(json.dumps(stored))
    assert api.train(_cfg(tiny, run, "xe.epochs=1")).steps == first.steps
    with pytest.raises(ConfigError, match="data.train_captions 'all' -> 'odd'"):
        api.train(_cfg(tiny, run, "xe.epochs=1", "data.train_captions=odd"), resume=True)


def test_a_key_the_method_never_reads_is_no_change(tiny, tmp_path):
    """xe samples nothing: a finished run with another decode.temperature is the same run (kept, not refused)."""
    run = tmp_path / "run"
    first = api.train(_cfg(tiny, run, "xe.epochs=1"))
    assert api.train(_cfg(tiny, run, "xe.epochs=1", "decode.temperature=0.5")).steps == first.steps
    with pytest.raises(ConfigError, match="decode.beam_size 3 -> 2"):  # read by its validation: a change
        api.train(_cfg(tiny, run, "xe.epochs=1", "decode.beam_size=2"))


def test_architecture_cannot_change_on_resume(tiny, tmp_path):
    run = tmp_path / "run"
    api.train(_cfg(tiny, run, "xe.epochs=1"))
    with pytest.raises(ConfigError, match=r"model.hidden_dim 16 -> 64 cannot change on resume"):
        api.train(_cfg(tiny, run, "xe.epochs=2", "model.hidden_dim=64"), resume=True)


def test_a_changed_learning_rate_is_applied_and_recorded(tiny, tmp_path):
    run = tmp_path / "run"
    common = ["optim.lr_decay_every=1", "optim.lr_decay_rate=0.5"]
    api.train(_cfg(tiny, run, "xe.epochs=1", *common))
    api.train(_cfg(tiny, run, "xe.epochs=2", "optim.lr=0.01", *common), resume=True)
    lrs = [r["lr"] for r in read_log(run / "log.jsonl") if r["split"] == "train" and r["epoch"] == 1]
    assert lrs and all(lr == pytest.approx(0.01 * 0.5) for lr in lrs)  # the new rate, decayed once
    assert json.loads((run / "config.json").read_text())["optim"]["lr"] == 0.01


def test_overwrite_starts_afresh(tiny, tmp_path):
    run = tmp_path / "run"
    api.train(_cfg(tiny, run, "xe.epochs=2"))
    result = api.train(_cfg(tiny, run, "xe.epochs=1"), overwrite=True)
    assert result.steps == 6
    assert max(r["step"] for r in read_log(run / "log.jsonl")) <= 6


@pytest.mark.parametrize("override,message", [
    ("xe.batch_size=-5", "xe.batch_size: expected at least 1, got -5"),
    ("xe.batch_size=0", "xe.batch_size: expected at least 1, got 0"),
    ("xe.epochs=0", "xe.epochs: expected at least 1, got 0"),
    ("xe.epochs=-3", "xe.epochs: expected at least 1, got -3"),
    ("max_steps=-1", "max_steps: expected at least 0, got -1"),
    ("val.batch_size=0", "val.batch_size: expected at least 1, got 0"),
    ("log_every=0", "log_every: expected at least 1, got 0"),
    ("threads=0", "threads: expected at least 1, got 0"),
    ("algorithm=scst rl.n_samples=0", "rl.n_samples: expected at least 1, got 0"),
    ("decode.beam_size=0", "decode.beam_size: expected at least 1, got 0"),
])
def test_settings_out_of_range_give_one_line(tmp_path, capsys, override, message):
    assert main(["train", str(EMPTY), f"out_dir={tmp_path}", *override.split()]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("name,damage", [
    ("policy.safetensors", b"not safetensors"),
    ("trainer.pt", b"\x80garbage"),
    ("config.json", b"{"),
    ("vocab.json", b"[1, 2"),
])
def test_a_damaged_checkpoint_gives_one_line_everywhere(tiny, tmp_path, capsys, name, damage):
    dataset, feats = tiny
    run = tmp_path / "run"
    api.train(_cfg(tiny, run, "xe.epochs=1"))
    for folder in ("best", "last"):
        (run / folder / name).write_bytes(damage)
    uses = [["eval", str(run / "best")], ["caption", str(run / "best"), str(tmp_path / "image.png")],
            ["train", str(EMPTY), *tiny_overrides(dataset, feats, run), "xe.epochs=2", "resume=true"],
            ["train", str(EMPTY), *tiny_overrides(dataset, feats, tmp_path / "rl"), "algorithm=scst",
             f"init_from={run / 'best'}"]]
    if name == "trainer.pt":
        uses = uses[2:3]  # only resuming reads the trainer state
    for argv in uses:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1 and "run/" in err, (argv, err)


@pytest.mark.parametrize("sig,code,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_sigterm_and_sigint_stop_and_say_how_to_resume(tiny, tmp_path, sig, code, word):
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "rlcap.cli", "train", str(EMPTY), *tiny_overrides(*tiny, run), "xe.epochs=50",
            "save_every=1"]
    # a background job of a non-interactive shell (CI under nohup, say) starts with SIGINT ignored,
    # which Python then keeps ignoring; the child gets the default disposition, as a terminal gives
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "last" / "checkpoint.json").exists():
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"rlcap train: {word}; its last checkpoint is step") and last.endswith("resume=true")


def test_a_resumed_log_appends_cleanly(tiny, tmp_path):
    dataset, feats = tiny
    run = tmp_path / "run"
    init = tmp_path / "xe"
    api.train(_cfg(tiny, init, "xe.epochs=1"))
    rl = ["algorithm=scst", f"init_from={init / 'best'}", "rl.batch_size=8", "rl.n_samples=2", "decode.max_len=6"]
    models = [o for o in tiny_overrides(dataset, feats, run) if not o.startswith("model.")]
    api.train(api.load_run_config(None, [*models, *rl, "rl.epochs=1", "track.to=[tensorboard]"]))
    events = sorted((run / "tensorboard").iterdir())
    api.train(api.load_run_config(None, [*models, *rl, "rl.epochs=2", "track.to=[tensorboard]"]), resume=True)
    records = read_log(run / "log.jsonl")
    assert sum(r["split"] == "note" for r in records) == 1
    steps = [r["step"] for r in records if r["split"] == "train"]
    assert steps == sorted(steps) and len(steps) == len(set(steps))
    # a fresh run into the folder (overwrite) does not keep the old run's curves
    api.train(api.load_run_config(None, [*models, *rl, "rl.epochs=1", "track.to=[tensorboard]"]), overwrite=True)
    assert not any(e in sorted((run / "tensorboard").iterdir()) for e in events)


def test_a_run_resumed_at_an_epochs_end_decays_its_rate_once_and_quietly(tiny, tmp_path):
    """Stopped by max_steps after the last batch of an epoch, a run resumes with that epoch's end: its
    schedule decays before this process's first optimizer step. That is the right order, so torch's
    warning of the wrong one is not shown, and the next epoch trains at the decayed rate."""
    run = tmp_path / "run"
    common = ["optim.lr_decay_every=1", "optim.lr_decay_rate=0.5", "xe.epochs=2"]
    api.train(_cfg(tiny, run, *common, "max_steps=6"))  # 6 batches an epoch: stopped at the epoch's last
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api.train(_cfg(tiny, run, *common), resume=True)
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    lrs = {r["epoch"]: r["lr"] for r in read_log(run / "log.jsonl") if r["split"] == "train"}
    assert lrs[0] == pytest.approx(5e-4) and lrs[1] == pytest.approx(2.5e-4)

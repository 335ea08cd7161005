"""Nothing of a user's is deleted or overwritten unless they asked for exactly that: a shapes data
folder of other settings, files beside the generated ones, a run that a failed overwrite or resume
was to replace or change, and a run that failed before it started."""

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.errors import ConfigError
from rlcap.train.run_folder import ASIDE
from tests.tiny import make_tiny_dataset, tiny_overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BAD_REWARD = "reward.weights={nosuchmod.x:f: 1.0}"
RL = ["algorithm=scst", "rl.epochs=1", "rl.batch_size=8", "rl.n_samples=2"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a folder (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _generate(folder: Path, n_train: int, n_val: int = 1, n_test: int = 1) -> None:
    assert main(["data", "shapes", "--out", str(folder), "--n-train", str(n_train), "--n-val", str(n_val),
                 "--n-test", str(n_test), "--workers", "1", "--image-size", "32"]) == 0


# --- shapes data folders ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["bench", "--benchmark", "shapes", "--methods", "xe"],
    ["demo", "--n-train", "4", "--n-val", "1", "--n-test", "1"],
])
def test_bench_and_demo_refuse_a_data_folder_of_other_settings(tmp_path, capsys, command):
    data = tmp_path / "shapes"
    _generate(data, 3)
    before = _snapshot(data)
    capsys.readouterr()
    argv = [*command, "--out", str(tmp_path / "out"), "--data", str(data), "--configs", str(CONFIGS)]
    assert main(argv) == 2
    changed = ("n_train 3 -> 10000, n_val 1 -> 1000, n_test 1 -> 1000, image_size 32 -> 128" if command[0] == "bench"
               else "n_train 3 -> 4, image_size 32 -> 128")
    assert capsys.readouterr().err == (
        f"rlcap {command[0]}: error: {data} holds shapes data generated with other settings ({changed}); give "
        f"--regenerate to replace it (only the files rlcap generated there are removed), or another data folder\n")
    assert _snapshot(data) == before
    assert not (tmp_path / "out").exists()


def test_bench_regenerate_goes_past_the_check(tmp_path, monkeypatch):
    """With --regenerate the benchmark's data is prepared (here: a stand-in that says it was called)."""
    from rlcap.bench.registry import BENCHMARKS

    data = tmp_path / "shapes"
    _generate(data, 3)

    class Prepared(Exception):
        pass

    def prepare(data_dir, image_size, report):
        raise Prepared(str(data_dir))

    monkeypatch.setitem(BENCHMARKS, "shapes", replace(BENCHMARKS["shapes"], prepare=prepare))
    argv = ["bench", "--methods", "xe", "--out", str(tmp_path / "out"), "--data", str(data), "--configs", str(CONFIGS)]
    assert main(argv) == 2  # refused: prepare is not reached
    with pytest.raises(Prepared, match=str(data)):
        main([*argv, "--regenerate"])


def test_run_benchmark_finds_its_recipes_from_any_working_directory(tmp_path, monkeypatch):
    """The Python API, like the CLI, reads rlcap's own recipes when given no configs folder."""
    from rlcap.bench.methods import run_benchmark
    from rlcap.bench.registry import BENCHMARKS

    seen = []

    class Prepared(Exception):
        pass

    def prepare(data_dir, image_size, report):
        raise Prepared(str(data_dir))

    monkeypatch.setitem(BENCHMARKS, "shapes", replace(BENCHMARKS["shapes"], prepare=prepare, check=seen.append))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Prepared):
        run_benchmark("shapes", ["xe"], tmp_path / "out", tmp_path / "data")
    assert seen == [tmp_path / "data"]
    with pytest.raises(ConfigError, match="shapes_xe.yaml is not there"):
        run_benchmark("shapes", ["xe"], tmp_path / "out", tmp_path / "data", configs=tmp_path)


def test_data_shapes_removes_only_files_it_wrote(tmp_path):
    data = tmp_path / "shapes"
    _generate(data, 8)  # images 0..9
    mine = {data / "notes.txt": b"my notes", data / "images" / "cat.png": b"my cat", data / "images" / "99.png": b"99"}
    for path, content in mine.items():
        path.write_bytes(content)
    _generate(data, 3)  # images 0..4: removes 5..9, which it wrote, and nothing else
    assert sorted(p.name for p in (data / "images").iterdir()) == ["0.png", "1.png", "2.png", "3.png", "4.png",
                                                                    "99.png", "cat.png"]
    assert all(path.read_bytes() == content for path, content in mine.items())
    manifest = json.loads((data / "manifest.json").read_text())
    assert (manifest["complete"], manifest["images_written"]) == (True, 5)


def test_data_shapes_refuses_numbered_images_it_did_not_write(tmp_path, capsys):
    data = tmp_path / "photos"
    (data / "images").mkdir(parents=True)
    (data / "images" / "0.png").write_bytes(b"a photo")
    capsys.readouterr()
    assert main(["data", "shapes", "--out", str(data), "--n-train", "2", "--n-val", "0", "--n-test", "0",
                 "--workers", "1"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap data: error: {data} holds images/0.png but no manifest.json: it was not generated by rlcap here, "
        f"so generating would overwrite it; give a folder of its own to the shapes data\n")
    assert (data / "images" / "0.png").read_bytes() == b"a photo" and not (data / "manifest.json").exists()


# --- run folders ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny dataset, an XE run and a finished SCST run from it: (dataset, feats, xe best, scst run)."""
    folder = tmp_path_factory.mktemp("safety")
    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe", **{"xe.epochs": 1})))
    scst = folder / "scst"
    api.train(api.load_run_config(None, _rl(dataset, feats, folder / "xe" / "best", scst)))
    return dataset, feats, folder / "xe" / "best", scst


def _rl(dataset, feats, init, out, *extra):
    models = [o for o in tiny_overrides(dataset, feats, out) if not o.startswith("model.")]
    return [*models, *RL, f"init_from={init}", *extra]


def _copy_run(finished, tmp_path) -> tuple[list[str], Path, dict[str, bytes]]:
    """A copy of the finished SCST run: (its command's overrides, its folder, its files)."""
    dataset, feats, init, scst = finished
    run = tmp_path / "run"
    shutil.copytree(scst, run)
    files = _snapshot(run)
    assert {"config.json", "log.jsonl", "best/policy.safetensors", "last/trainer.pt"} <= set(files)
    return _rl(dataset, feats, init, run), run, files


def test_a_failed_resume_leaves_the_run_as_it_was(finished, tmp_path, capsys):
    """A resume whose reward cannot be built does not record its settings: the original command still
    continues the run."""
    command, run, files = _copy_run(finished, tmp_path)
    assert main(["train", str(CONFIGS / "shapes_scst.yaml"), *command, "rl.epochs=2", "resume=true", BAD_REWARD]) == 2
    assert "nosuchmod" in capsys.readouterr().err
    assert _snapshot(run) == files
    again = api.train(api.load_run_config(None, command))  # not "other settings"
    assert again.steps == json.loads((run / "last" / "checkpoint.json").read_text())["step"]


def test_a_failed_overwrite_puts_the_old_run_back(finished, tmp_path, capsys):
    command, run, files = _copy_run(finished, tmp_path)
    (run / "mine.txt").write_text("not a run file")
    assert main(["train", str(CONFIGS / "shapes_scst.yaml"), *command, "overwrite=true", BAD_REWARD]) == 2
    assert "nosuchmod" in capsys.readouterr().err
    assert _snapshot(run) == {**files, "mine.txt": b"not a run file"}
    assert not list(run.glob(f"{ASIDE}*"))


def test_an_overwrite_deletes_the_old_run_once_started(finished, tmp_path):
    command, run, files = _copy_run(finished, tmp_path)
    api.train(api.load_run_config(None, [*command, "max_steps=1"]), overwrite=True)
    assert not list(run.glob(f"{ASIDE}*"))
    assert json.loads((run / "config.json").read_text())["max_steps"] == 1
    assert [r["step"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())
            if r["split"] == "train"] == [1]


def test_a_run_killed_before_it_started_gets_the_old_run_back(finished, tmp_path):
    """A kill between moving the old run aside and the new run's first step: the next run into the
    folder puts the old run back (its process is gone) and the original command finds it finished."""
    command, run, files = _copy_run(finished, tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    aside = run / f"{ASIDE}{int(dead.stdout)}"
    aside.mkdir()
    for name in ("config.json", "log.jsonl", "best", "last"):
        (run / name).rename(aside / name)
    (run / "log.jsonl").write_text("")  # what the killed run had opened
    result = api.train(api.load_run_config(None, command))
    assert result.steps == json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    now = _snapshot(run)
    assert json.loads(now.pop("config.json")) == {**json.loads(files.pop("config.json")), "out_dir": str(run)}
    assert now == files and not aside.exists()  # (config.json: as the finished run's, but for the copy's out_dir)


def test_resume_and_overwrite_together_are_refused(finished, tmp_path, capsys):
    command, run, files = _copy_run(finished, tmp_path)
    with pytest.raises(ConfigError) as err:
        api.train(api.load_run_config(None, command), resume=True, overwrite=True)
    assert str(err.value) == f"resume=true continues the run in {run} and overwrite=true replaces it: give one of them"
    assert _snapshot(run) == files


@pytest.mark.parametrize("broken,message", [
    (BAD_REWARD, "nosuchmod"),
    ("reward.weights={cider_d: 1.0, embedding: 0.5}", "reward.paths.embedding=PATH"),
])
def test_a_run_that_fails_at_start_up_leaves_no_config(finished, tmp_path, broken, message):
    """The corrected command is then accepted without overwrite=true."""
    dataset, feats, init, _ = finished
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match=message):
        api.train(api.load_run_config(None, _rl(dataset, feats, init, run, broken)))
    assert not (run / "config.json").exists()
    result = api.train(api.load_run_config(None, _rl(dataset, feats, init, run)))
    assert result.steps > 0 and (run / "config.json").is_file()

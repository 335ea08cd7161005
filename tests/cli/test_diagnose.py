"""`rlcap diagnose` in-process on tiny checkpoints: the figures' JSON, the printed tables, one-line errors."""

import json
import math

import pytest

from rlcap import api
from rlcap.cli import main
from tests.cli.test_cli_errors import _one_line_error
from tests.tiny import make_tiny_dataset, tiny_overrides


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny dataset, an XE checkpoint (1 epoch) and an actor-critic checkpoint from it (CIDEr-D reward)."""
    folder = tmp_path_factory.mktemp("diagnose")
    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe", **{"xe.epochs": 1})))
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "ac", **{
        "algorithm": "ac", "init_from": folder / "xe" / "best", "rl.epochs": 1, "rl.batch_size": 8,
        "rl.n_samples": 2, "ac.value_pretrain_epochs": 1, "reward.weights": "{cider_d: 1.0}"})))
    return dataset, feats, folder


def _run(capsys, argv):
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_reward_spread_writes_the_figures_and_the_shares_sum_to_one(runs, tmp_path, capsys):
    _, _, folder = runs
    out = _run(capsys, ["diagnose", "reward-spread", str(folder / "xe" / "best"), "--samples", "4", "--images", "5",
                        "--temperature", "1.5", "--rewards", "cider_d:0.5,bleu_1:0.5", "--out", str(tmp_path / "s.json")])
    got = json.loads((tmp_path / "s.json").read_text())
    assert set(got) == {"measurement", "checkpoint", "split", "images", "samples_per_image", "temperature",
                        "definition", "rewards", "correlation", "combined"}
    assert (got["split"], got["images"], got["samples_per_image"], got["temperature"]) == ("val", 5, 4, 1.5)
    assert list(got["rewards"]) == ["cider_d", "bleu_1"]
    assert all(set(r) == {"weight", "mean", "within_std", "share", "own_share", "even_weight"}
               for r in got["rewards"].values())
    cider, bleu = got["rewards"]["cider_d"], got["rewards"]["bleu_1"]
    assert cider["even_weight"] == 0.5  # the first reward keeps its weight; the second's term gets its spread
    assert bleu["even_weight"] * bleu["within_std"] == pytest.approx(0.5 * cider["within_std"])
    assert "even_weight: the weights that give each reward the within-image spread of cider_d's term" in out
    assert sum(r["share"] for r in got["rewards"].values()) == pytest.approx(1.0)
    assert got["correlation"]["cider_d"]["cider_d"] == pytest.approx(1.0)
    assert got["correlation"]["cider_d"]["bleu_1"] == got["correlation"]["bleu_1"]["cider_d"]
    assert all(r["within_std"] > 0 for r in got["rewards"].values())  # 4 samples at temperature 1.5 differ
    assert "reward" in out and "R (combined)" in out and "share_i = Cov(w_i r_i, R) / Var(R)" in out


def test_reward_spread_defaults_to_the_run_s_reward_and_settings(runs, tmp_path, capsys):
    dataset, feats, folder = runs
    _run(capsys, ["diagnose", "reward-spread", str(folder / "ac" / "best"), "--split", "test", f"data.features={feats}",
                  "--out", str(tmp_path / "s.json")])
    got = json.loads((tmp_path / "s.json").read_text())
    # the run's reward.weights, rl.n_samples and decode.temperature; the test split's 6 images
    assert list(got["rewards"]) == ["cider_d"] and got["rewards"]["cider_d"]["weight"] == 1.0
    assert (got["split"], got["images"], got["samples_per_image"], got["temperature"]) == ("test", 6, 2, 1.0)
    assert got["rewards"]["cider_d"]["share"] == pytest.approx(1.0)


def test_reward_forms_labels_the_samples_and_their_advantages_balance(runs, tmp_path, capsys):
    """Each sample is labelled by the first form it matches; the forms' counts add up to every sample, their
    advantages (leave-one-out, image by image) balance to 0, for R and for each reward alone, and each form's
    examples are its own."""
    _, _, folder = runs
    out = _run(capsys, ["diagnose", "reward-forms", str(folder / "xe" / "best"), "--samples", "4", "--images", "5",
                        "--temperature", "1.5", "--rewards", "cider_d:1,bleu_1:2", "--form", r"long=^(\S+ ){5}",
                        "--form", r"short=^(\S+( \S+){0,2})?$", "--examples", "2", "--max-len", "7",
                        "--out", str(tmp_path / "f.json")])
    got = json.loads((tmp_path / "f.json").read_text())
    assert (got["measurement"], got["split"], got["images"], got["samples_per_image"], got["temperature"],
            got["max_len"]) == ("reward-forms", "val", 5, 4, 1.5, 7)
    assert got["rewards"] == {"cider_d": 1.0, "bleu_1": 2.0}
    forms = got["forms"]
    assert list(forms) == ["long", "short", "other"]
    assert forms["long"]["pattern"] == r"^(\S+ ){5}" and forms["other"]["pattern"] is None
    assert sum(f["samples"] for f in forms.values()) == 5 * 4
    assert sum(f["samples"] > 0 for f in forms.values()) >= 2  # at temperature 1.5 the lengths vary
    for measure in ("R", "cider_d", "bleu_1"):
        total = sum(f["samples"] * (f["mean_advantage"] if measure == "R" else f["by_reward"][measure]["mean_advantage"])
                    for f in forms.values() if f["samples"])
        assert total == pytest.approx(0.0, abs=1e-9)
    for f in (f for f in forms.values() if f["samples"]):  # R is 1 x CIDEr-D + 2 x BLEU-1, form by form
        parts = f["by_reward"]
        assert f["mean_reward"] == pytest.approx(parts["cider_d"]["mean_reward"] + 2 * parts["bleu_1"]["mean_reward"])
        assert 1 <= f["images"] <= 5 and f["contested"] <= f["images"]
        assert 1 <= len(f["examples"]) <= 2
    assert all(6 <= len(c.split()) <= 7 for c in forms["long"]["examples"])  # --max-len 7
    assert all(len(c.split()) <= 3 for c in forms["short"]["examples"])  # (an empty caption too)
    assert all(4 <= len(c.split()) <= 5 for c in forms["other"]["examples"]), forms["other"]["examples"]
    assert "advantage R" in out and "advantage bleu_1" in out and "leave-one-out" in out


def test_reward_forms_needs_a_form_and_a_pattern(runs, capsys):
    _, _, folder = runs
    _one_line_error(capsys, ["diagnose", "reward-forms", str(folder / "xe" / "best")],
                    "the following arguments are required: --form")
    _one_line_error(capsys, ["diagnose", "reward-forms", str(folder / "xe" / "best"), "--form", "third=(circle"],
                    "third: '(circle' is not a regular expression")
    _one_line_error(capsys, ["diagnose", "reward-forms", str(folder / "xe" / "best"), "--form", "circle"],
                    "expected NAME=REGEX")


def test_value_fit_reports_r_squared_by_position(runs, tmp_path, capsys):
    _, _, folder = runs
    out = _run(capsys, ["diagnose", "value-fit", str(folder / "ac" / "best"), "--samples", "3",
                        "--out", str(tmp_path / "v.json")])
    got = json.loads((tmp_path / "v.json").read_text())
    assert set(got) == {"measurement", "checkpoint", "split", "value_features", "images", "samples_per_image",
                        "temperature", "mean_reward", "definition", "r2_overall", "r2_by_position",
                        "captions_by_position"}
    assert (got["split"], got["images"], got["samples_per_image"], got["value_features"]) == ("val", 6, 3, "fc")
    assert got["captions_by_position"][0] == 6 * 3
    assert len(got["r2_by_position"]) == len(got["captions_by_position"])
    assert got["r2_overall"] is not None and math.isfinite(got["r2_overall"])
    assert "position" in out and "overall" in out


def test_prefix_credit_on_a_dataset(runs, tmp_path, capsys):
    dataset, _, _ = runs
    out = _run(capsys, ["diagnose", "prefix-credit", str(dataset), "--swap", "2", "--clips", "10",
                        "--out", str(tmp_path / "p.json")])
    got = json.loads((tmp_path / "p.json").read_text())
    assert set(got) == {"measurement", "dataset", "split", "clips", "swap", "eos_counts", "definition", "metrics"}
    assert (got["split"], got["clips"], got["swap"], got["eos_counts"]) == ("train", 10, 2, True)
    assert list(got["metrics"]) == ["cider_d", "cider"]
    for m in got["metrics"].values():
        assert set(m) == {"wrong", "later", "captions", "later_share"} and 1 <= m["captions"] <= 10
    assert "cider_d" in out and "wrong words" in out


def test_missing_checkpoint(capsys, tmp_path):
    _one_line_error(capsys, ["diagnose", "reward-spread", str(tmp_path / "nope")], "checkpoint folder not found")
    _one_line_error(capsys, ["diagnose", "value-fit", str(tmp_path / "nope")], "checkpoint folder not found")


def test_unknown_reward(runs, capsys):
    _, _, folder = runs
    _one_line_error(capsys, ["diagnose", "reward-spread", str(folder / "xe" / "best"), "--rewards", "cider_d:0.5,spyce:0.5"],
                    "unknown reward 'spyce'", "allowed: cider_d")
    _one_line_error(capsys, ["diagnose", "reward-spread", str(folder / "xe" / "best"), "--rewards", "cider_d:inf"],
                    "argument --rewards", "cider_d:inf")
    _one_line_error(capsys, ["diagnose", "prefix-credit", str(runs[0]), "--metrics", "cidr"], "unknown reward 'cidr'")


def test_split_without_images(runs, tmp_path, capsys):
    dataset, _, folder = runs
    data = json.loads(dataset.read_text())
    data["images"] = [im for im in data["images"] if im["split"] != "test"]
    no_test = tmp_path / "no_test.json"
    no_test.write_text(json.dumps(data))
    _one_line_error(capsys, ["diagnose", "reward-spread", str(folder / "xe" / "best"), "--split", "test",
                             f"data.dataset={no_test}"], "no images in split 'test'", "'train', 'val'")
    _one_line_error(capsys, ["diagnose", "prefix-credit", str(no_test), "--split", "test"], "no images in split 'test'")


def test_value_fit_needs_an_actor_critic_checkpoint(runs, capsys):
    _, _, folder = runs
    _one_line_error(capsys, ["diagnose", "value-fit", str(folder / "xe" / "best")], "holds no value network",
                    "algorithm=ac")


def test_one_sample_has_no_spread(capsys):
    _one_line_error(capsys, ["diagnose", "reward-spread", "ckpt", "--samples", "1"],
                    "argument --samples: expected an integer >= 2, got 1")


def test_reward_spread_takes_reward_settings_the_run_did_not_have(runs, tmp_path, capsys):
    """reward.KEY=VALUE changes the reward section the measurement builds from (as the paths of a reward an XE
    checkpoint never trained with): here EOS left out of CIDEr-D moves its mean; value-fit refuses such a setting."""
    _, _, folder = runs
    rc = main(["diagnose", "reward-spread", str(folder / "xe" / "best"), "--images", "2", "--samples", "2",
               "--rewards", "cider_d:1,bleu_1:1", "reward.eos_counts=false", "--out", str(tmp_path / "s.json")])
    assert rc == 0
    no_eos = json.loads((tmp_path / "s.json").read_text())["rewards"]["cider_d"]["mean"]
    assert main(["diagnose", "reward-spread", str(folder / "xe" / "best"), "--images", "2", "--samples", "2",
                 "--rewards", "cider_d:1,bleu_1:1", "--out", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["rewards"]["cider_d"]["mean"] != no_eos  # it was applied
    capsys.readouterr()
    assert main(["diagnose", "value-fit", str(folder / "ac" / "best"), "reward.eos_counts=false"]) != 0
    assert "reward" in capsys.readouterr().err  # only reward-spread reads them; elsewhere refused, not dropped

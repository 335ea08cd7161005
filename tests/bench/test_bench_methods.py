"""The method benchmark end to end on tiny data: every method trained, tabulated and plotted."""

import json

import pytest

from rlcap.bench.methods import run_benchmark
from rlcap.bench.report import results_markdown
from rlcap.errors import ConfigError
from tests.tiny import tiny_overrides

CONFIGS = __import__("pathlib").Path(__file__).resolve().parents[2] / "configs"


def test_bench_methods_tiny(tiny_data, tmp_path):
    dataset, feats = tiny_data
    tiny = [o for o in tiny_overrides(dataset, feats, tmp_path / "unused") if not o.startswith("out_dir=")]
    model_free = [o for o in tiny if not o.startswith("model.")]
    rl = [*model_free, "rl.epochs=1", "rl.batch_size=12", "rl.n_samples=5", "decode.max_len=6"]
    results = run_benchmark("shapes", ["xe", "scst", "sll_me", "sll_sle"], tmp_path / "bench", configs=CONFIGS,
                            rl_overrides=rl, xe_overrides=[*tiny, "xe.epochs=2"], prepared=(dataset, feats))
    saved = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert saved == json.loads(json.dumps(results))
    assert list(saved["methods"]) == ["xe", "scst", "sll_me", "sll_sle"]
    for row in saved["methods"].values():
        assert {"CIDEr", "Bleu_4", "ROUGE_L"} <= set(row["beam"])
        for how in ("rs", "bs"):
            assert set(row[how]) == {"CIDEr", "Div-1", "Div-2", "mBLEU-4"}
            assert 0.0 <= row[how]["Div-1"] <= 1.0 and 0.0 <= row[how]["mBLEU-4"] <= 1.0
    for method in ("scst", "sll_sle"):  # the training cost of the method's own stage, from its log's times
        cost = saved["methods"][method]["cost"]
        assert 0 < cost["seconds_per_update"] and cost["minutes"] * 60 >= cost["seconds_per_update"]
    table = (tmp_path / "bench" / "results.md").read_text()
    assert table.startswith("| method | ") and "| sll_sle |" in table and "s/update" in table
    assert (tmp_path / "bench" / "curves.png").stat().st_size > 1000

    # run again on the same folder: no stage trained, no row evaluated again but the one whose checkpoint
    # changed (an evaluation cut short resumes at the first method not yet evaluated)
    sll_sle = tmp_path / "bench" / "sll_sle" / "best" / "checkpoint.json"
    sll_sle.write_text(sll_sle.read_text() + " ")
    said: list[str] = []
    again = run_benchmark("shapes", ["xe", "scst", "sll_me", "sll_sle"], tmp_path / "bench", configs=CONFIGS,
                          rl_overrides=rl, xe_overrides=[*tiny, "xe.epochs=2"], prepared=(dataset, feats),
                          report=said.append)
    assert [line.split(":")[0] for line in said if "evaluat" in line] == ["xe", "scst", "sll_me", "evaluating sll_sle"]
    assert all("evaluated before" in line for line in said if line.startswith(("xe:", "scst:", "sll_me:")))
    assert json.loads(json.dumps(again)) == saved  # sll_sle evaluated again: the same weights, the same row


def test_a_larger_budget_continues_the_stages_only_when_resumed(tiny_data, tmp_path):
    """A bench folder trained at one RL budget and asked for a larger one: refused, naming the stage, without
    ``resume``; with it the RL stage continues its run to the new budget (its log goes on from its last step) and the
    XE stage, unchanged, is not trained again nor its row evaluated again."""
    dataset, feats = tiny_data
    tiny = [o for o in tiny_overrides(dataset, feats, tmp_path / "unused") if not o.startswith("out_dir=")]
    rl = [o for o in tiny if not o.startswith("model.")] + ["rl.batch_size=12", "rl.n_samples=5", "decode.max_len=6"]
    out = tmp_path / "bench"

    said: list[str] = []

    def bench(epochs, resume=False):
        said.clear()
        return run_benchmark("shapes", ["xe", "scst_end"], out, configs=CONFIGS, rl_overrides=[*rl, f"rl.epochs={epochs}"],
                             xe_overrides=[*tiny, "xe.epochs=1"], prepared=(dataset, feats), resume=resume,
                             report=said.append)

    def steps(stage):
        lines = [json.loads(line) for line in (out / stage / "log.jsonl").read_text().splitlines()]
        return [(r["step"], r["epoch"]) for r in lines if r["split"] == "val"]

    bench(1)
    xe, scst = steps("xe"), steps("scst")
    assert [epoch for _, epoch in scst] == [1]
    with pytest.raises(ConfigError, match=r"scst already holds a run with other settings \(rl.epochs.*--resume"):
        bench(2)
    assert steps("scst") == scst
    bench(2, resume=True)
    assert steps("xe") == xe
    continued = steps("scst")
    assert continued[0] == scst[0] and [epoch for _, epoch in continued] == [1, 2]
    assert continued[1][0] == 2 * scst[0][0]  # the second epoch's steps after the first's
    # XE's row read from before; scst_end (the scst run's last checkpoint) decoded again from its new one
    assert [line.split(":")[0] for line in said if "evaluat" in line] == ["xe", "evaluating scst_end"]


def test_cli_resume_reaches_the_stages(tmp_path, monkeypatch):
    import rlcap.bench.methods
    from rlcap.cli import main

    asked = []

    def fake(*args, resume=False, **kwargs):
        asked.append(resume)
        raise ConfigError("stop here")

    monkeypatch.setattr(rlcap.bench.methods, "run_benchmark", fake)
    assert main(["bench", "--methods", "xe", "--out", str(tmp_path), "--resume"]) == 2
    assert main(["bench", "--methods", "xe", "--out", str(tmp_path)]) == 2
    assert asked == [True, False]


def test_unknown_method_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match="sll_sle"):
        run_benchmark("shapes", ["xe", "ppo"], tmp_path)


def test_markdown_layout():
    row = {"beam": {"METEOR": 0.2, "CIDEr": 1.0}, "rs": {"CIDEr": 0.5, "Div-1": 0.3, "Div-2": 0.4, "mBLEU-4": 0.6},
           "bs": {"CIDEr": 0.9, "Div-1": 0.2, "Div-2": 0.3, "mBLEU-4": 0.7}}
    lines = results_markdown({"methods": {"scst": row}}).splitlines()
    assert lines[0] == ("| method | beam METEOR | beam CIDEr | rs CIDEr | rs Div-1 | rs Div-2 | rs mBLEU-4 | "
                        "bs CIDEr | bs Div-1 | bs Div-2 | bs mBLEU-4 | train min | s/update |")
    assert lines[2] == "| scst | 0.200 | 1.000 | 0.500 | 0.300 | 0.400 | 0.600 | 0.900 | 0.200 | 0.300 | 0.700 | - | - |"
    row["cost"] = {"minutes": 12.25, "seconds_per_update": 0.914}
    assert results_markdown({"methods": {"scst": row}}).splitlines()[2].endswith("| 0.700 | 12.2 | 0.91 |")


def test_markdown_adds_the_tempered_samples_columns():
    rs = {"CIDEr": 0.5, "Div-1": 0.3, "Div-2": 0.4, "mBLEU-4": 0.6}
    row = {"beam": {"CIDEr": 1.0}, "rs": rs, "rs@0.5": {**rs, "Div-2": 0.25}, "bs": rs}
    lines = results_markdown({"methods": {"sll_sle": row, "xe": {k: v for k, v in row.items() if k != "rs@0.5"}}})
    head = lines.splitlines()[0]
    assert "| rs mBLEU-4 | rs@0.5 CIDEr | rs@0.5 Div-1 | rs@0.5 Div-2 | rs@0.5 mBLEU-4 | bs CIDEr |" in head
    assert lines.splitlines()[2].startswith("| sll_sle | 1.000 | 0.500 | 0.300 | 0.400 | 0.600 | 0.500 | 0.300 | 0.250 |")
    assert lines.splitlines()[3].startswith("| xe | 1.000 | 0.500 | 0.300 | 0.400 | 0.600 | - | - | - | - | 0.500 |")


def test_tempered_samples_follow_the_benchmark_temperature(tiny_data, tmp_path):
    """Near temperature 0 the 5 samples of an image are its greedy caption (but for near-ties of an
    undertrained model); the row carries rs@T."""
    from rlcap import api
    from rlcap.bench.rows import caption_sets, method_row
    from rlcap.bench.registry import BENCHMARKS
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.decoding.options import Decoding
    from rlcap.decoding.split import decode_split
    from rlcap.eval.open_run import open_run

    dataset, feats = tiny_data
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "xe")))
    opened = open_run(tmp_path / "xe" / "best", device="cpu")
    model, vocab = opened.policy, opened.vocab
    test = load_data(DataConfig(dataset=str(dataset), features=str(feats), min_count=1), ("test",),
                     vocab=vocab).splits["test"]
    greedy = decode_split(model, test, vocab, Decoding("greedy", 6))
    cold = caption_sets(model, test, vocab, "rs", 5, 6, seed=0, temperature=1e-4)
    same = [c == greedy[i] for i in test.ids for c in cold[i]]
    assert len(same) == 5 * len(test.ids) and sum(same) >= 0.9 * len(same)  # (a near-tie of two words may differ)
    row = method_row(model, test, vocab, ["CIDEr"], 6, sample_temperature=1e-4)
    assert row["rs@0.0001"]["Div-1"] <= row["rs"]["Div-1"] and "rs@1" not in method_row(model, test, vocab, ["CIDEr"], 6)
    assert BENCHMARKS["coco-concepts"].sample_temperature == 0.5 and BENCHMARKS["shapes"].sample_temperature == 1.0


def test_cli_image_size_reaches_the_feature_extraction(tmp_path, monkeypatch):
    import rlcap.demo
    from rlcap.cli import main

    asked = []

    def prepare(data_dir, image_size, report):
        asked.append(image_size)
        raise ConfigError("stop here")  # the data preparation is all this test looks at

    monkeypatch.setattr(rlcap.demo, "prepare_shapes", prepare)
    assert main(["bench", "--methods", "xe", "--out", str(tmp_path), "--image-size", "224"]) == 2
    assert main(["bench", "--methods", "xe", "--out", str(tmp_path)]) == 2
    assert asked == [224, 128]


def test_bench_threads_are_set_before_its_own_work(tmp_path, monkeypatch):
    """``rlcap bench --threads`` sets torch's threads before the data preparation (the features it encodes and
    the test evaluations run in this process): a count as given, ``auto`` (the default) as a run resolves it."""
    import torch

    import rlcap.demo
    from rlcap.cli import main
    from rlcap.devices import cpu_threads

    seen = []

    def prepare(data_dir, image_size, report):
        seen.append(torch.get_num_threads())
        raise ConfigError("stop here")

    monkeypatch.setattr(rlcap.demo, "prepare_shapes", prepare)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["bench", "--methods", "xe", "--out", str(tmp_path), "--threads", "1"]) == 2
        torch.set_num_threads(1)
        assert main(["bench", "--methods", "xe", "--out", str(tmp_path), "--threads", "3"]) == 2
        assert main(["bench", "--methods", "xe", "--out", str(tmp_path)]) == 2
    finally:
        torch.set_num_threads(before)
    assert seen[:2] == [1, 3]
    assert 1 <= seen[2] <= cpu_threads("auto", others=lambda: 0)


def test_ac_lookahead_decodes_the_ac_checkpoint_at_the_lambda_chosen_on_validation(tiny_data, tmp_path):
    """``ac_lookahead`` shares every stage with ``ac`` and differs only in how its beam column is
    decoded; at the only lambda offered (1, plain beam search) its row must equal ac's."""
    dataset, feats = tiny_data
    tiny = [o for o in tiny_overrides(dataset, feats, tmp_path / "unused") if not o.startswith("out_dir=")]
    model_free = [o for o in tiny if not o.startswith("model.")]
    rl = [*model_free, "rl.epochs=1", "rl.batch_size=12", "rl.n_samples=2", "decode.max_len=6",
          "ac.value_pretrain_epochs=1", "ac.lookahead=[1.0]", "embedding.epochs=1", "embedding.batch_size=8",
          "embedding.model.word_dim=8", "embedding.model.hidden_dim=8", "embedding.model.joint_dim=8"]
    results = run_benchmark("shapes", ["ac", "ac_lookahead"], tmp_path / "bench", configs=CONFIGS,
                            rl_overrides=rl, xe_overrides=[*tiny, "xe.epochs=1"], prepared=(dataset, feats))
    ac, lookahead = results["methods"]["ac"], results["methods"]["ac_lookahead"]
    assert lookahead["lookahead"]["best_lambda"] == 1.0 and list(lookahead["lookahead"]["scores"]) == ["1.0"]
    assert lookahead["beam"] == ac["beam"] and lookahead["rs"] == ac["rs"]
    assert "lookahead" not in ac

    # run again: the ac run, finished, keeps the lambda it chose (lookahead.json not rewritten), and neither
    # row is evaluated again
    choice = tmp_path / "bench" / "ac" / "lookahead.json"
    written = choice.stat().st_mtime_ns
    said: list[str] = []
    again = run_benchmark("shapes", ["ac", "ac_lookahead"], tmp_path / "bench", configs=CONFIGS,
                          rl_overrides=rl, xe_overrides=[*tiny, "xe.epochs=1"], prepared=(dataset, feats),
                          report=said.append)
    assert choice.stat().st_mtime_ns == written
    assert [line for line in said if "evaluat" in line] == [
        f"{m}: evaluated before with this checkpoint (rows/{m}.json), not again" for m in ("ac", "ac_lookahead")]
    assert json.loads(json.dumps(again))["methods"] == json.loads(json.dumps(results))["methods"]


def test_a_checkpoint_holding_weights_already_evaluated_reuses_their_row(tmp_path):
    """A run's ``last/`` that is its ``best/`` (scst_end beside scst) has the same weights digest, so its row and
    captions are those already made in the call; other weights, or another decoder, are another digest."""
    import torch
    from safetensors.torch import save_file

    from rlcap.bench.methods import _twin_row, weights_digest

    folders = {}
    for name, value in (("best", 1.0), ("last", 1.0), ("other", 2.0)):
        folders[name] = tmp_path / "scst" / name
        folders[name].mkdir(parents=True)
        save_file({"w": torch.full((3,), value)}, str(folders[name] / "policy.safetensors"))
        (folders[name] / "checkpoint.json").write_text(json.dumps({"name": name}))  # (not weights: not read)
    digest = {name: weights_digest(folder, "beam") for name, folder in folders.items()}
    assert digest["best"] == digest["last"] != digest["other"]
    assert weights_digest(folders["best"], "lookahead") != digest["best"]
    out = tmp_path / "bench"
    (out / "captions").mkdir(parents=True)
    (out / "captions" / "scst.json").write_text(json.dumps({"captions": {"1": "a red circle"}}))
    made = {"beam": {"CIDEr": 2.4}, "checkpoint": "scst/best", "cost": {"minutes": 3.0}}
    said = []
    row = _twin_row(out, "scst_end", "scst", {"checkpoint": "scst/last"}, made, said.append)
    assert row == {"beam": {"CIDEr": 2.4}} and said == [
        "scst_end: the weights scst was evaluated with (the same checkpoint files), its row not made again"]
    assert json.loads((out / "captions" / "scst_end.json").read_text()) == {"captions": {"1": "a red circle"}}
    assert json.loads((out / "rows" / "scst_end.json").read_text()) == {"key": {"checkpoint": "scst/last"},
                                                                        "row": row}

"""Every benchmark script answers --help (and so imports cleanly and does no work at import time)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# benchdoc: the scripts' shared helpers; gpu_checks: gpu_check.py's comparisons (tests/test_gpu_check.py); hf_scored:
# bench_hf.py's table of SCST sampled with and without autograd; hf_vlm_speed: its instruction VLMs' sampling
# against their generate; smolvlm_shapes: SmolVLM folders at published widths (shared_cores_check.py, fsdp_peak_memory.py)
HELPERS = ("benchdoc.py", "gpu_checks.py", "hf_scored.py", "hf_vlm_speed.py", "smolvlm_shapes.py")
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)


def test_there_are_scripts():
    assert len(SCRIPTS) >= 15


# Run in one child process (torch imported once, not once a script): each script as __main__ with --help,
# its exit code and what it printed, as JSON on the last line.
HELP_ALL = """
import contextlib, io, json, os, runpy, sys, traceback
done = {}
for script in sys.argv[1:]:
    out, err, code = io.StringIO(), io.StringIO(), None
    sys.argv, sys.path[0] = [script, "--help"], os.path.dirname(script)  # as `python SCRIPT --help` runs it
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            code = stop.code or 0
        except BaseException:
            traceback.print_exc()
    done[script] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(done))
"""


@pytest.fixture(scope="module")
def helps(tmp_path_factory):
    """Every script's ``--help`` (exit code, stdout, stderr), and whether BENCHMARKS.md stayed as it was."""
    doc = BENCHMARKS.parent / "docs" / "BENCHMARKS.md"
    before, cwd = doc.read_bytes(), tmp_path_factory.mktemp("help")
    child = subprocess.run([sys.executable, "-c", HELP_ALL, *map(str, SCRIPTS)], capture_output=True, text=True,
                           timeout=300, cwd=cwd)
    assert child.returncode == 0, child.stderr[-2000:]
    done = json.loads(child.stdout.splitlines()[-1])
    return {Path(script): row for script, row in done.items()}, doc.read_bytes() == before


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_help(script, helps):
    done, untouched = helps
    code, stdout, stderr = done[script]
    assert code == 0, stderr  # (None: the script ended without exiting, so --help did not stop it)
    assert stdout.startswith("usage: ") and script.name in stdout.splitlines()[0]
    assert untouched  # --help wrote nothing


def test_bench_pg_reading_is_computed_from_the_figures():
    """bench_pg's reading states ratios of the figures it is given, not prose typed in with old figures."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_pg
    finally:
        sys.path.remove(str(BENCHMARKS))
    updates = {"pg_s": 3.0, "scst_s": 2.0, "rollout_s": 1.5}
    rewards = {"rows": 1000, "needed": 500, "unique": 450, "cider_d_unique_s": 0.03, "spider_unique_s": 0.75,
               "bcmr_unique_s": 0.3, "spider_warm_s": 0.075}
    throughput = {"rollout_words_per_cpu_s": 900.0, "greedy_words_per_cpu_s": 1000.0}
    one = {"updates": updates, "rewards": rewards, "throughput": throughput}
    two = {"updates": {**updates, "pg_s": 4.0}, "rewards": rewards, "throughput": throughput}
    text = bench_pg.reading({"random": one, "peaked": two})
    assert "costs 1.5-2.0x an SCST step" in text            # 3/2 and 4/2
    assert "rollouts take 38-50% of it" in text              # 1.5/4 and 1.5/3
    assert "0.90x the CPU time of a greedy word" in text
    assert "CIDEr-D takes 0.8-1.0% of an update" in text     # 0.03/4 and 0.03/3
    assert "SPIDEr's scoring takes 50%" in text and "BCMR's 20%" in text
    assert "50% of all rollout rows" in text and "90% of those" in text and "costs 10% of its first" in text


def test_gpu_check_runs_its_comparisons_between_two_devices(tmp_path):
    """Where CUDA is absent, the GPU check's comparisons themselves run CPU against CPU through the script:
    every one passes, and the section names each with its difference and bound."""
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--devices", "cpu,cpu", "--archs", "fc",
                           "--images", "16", "--hidden", "32", "--xe-steps", "40", "--samples", "192",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| fc |")]
    results = [r[5].strip() for r in rows]  # the device reward's row: "not compared" until it can be imported
    assert len(rows) == 10 and results[:8] + results[9:] == ["pass"] * 9 and results[8] in ("pass", "not compared")
    assert f"{results.count('pass')} of {results.count('pass')} comparisons passed" in text
    assert "Command: `python benchmarks/gpu_check.py --archs fc --devices cpu,cpu --images 16" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the script would run")
def test_gpu_check_without_cuda_says_so_and_writes_nothing(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and not out.exists()
    assert done.stdout.count("\n") == 1 and "no CUDA device" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the script would run")
def test_bench_gpu_without_cuda_says_it_was_not_run(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_gpu.py"), "--out", str(tmp_path / "B.md")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and not (tmp_path / "B.md").exists()
    assert done.stdout.startswith("bench_gpu: not run: ") and "sees no CUDA device" in done.stdout


@pytest.mark.slow
def test_bench_gpu_rows_run_on_the_cpu_at_a_tiny_size(tmp_path):
    """make bench-gpu's rows with --device cpu: XE, then timed SCST steps of each model in fp32 and bf16, every
    figure of a row there and its section written where --out says."""
    captions = {str(i): [f"a {c} dog runs on the {g}", f"the {c} dog is on the {g}", f"a dog near a {c} cat"]
                for i, (c, g) in enumerate((c, g) for c in ("red", "brown", "black") for g in ("grass", "road"))}
    (tmp_path / "captions.json").write_text(json.dumps(captions))
    doc = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_gpu.py"), "--device", "cpu", "--hidden", "16",
                           "--regions", "3", "--feat-dim", "8", "--images", "4", "--steps", "1", "--xe-steps", "2",
                           "--captions", str(tmp_path / "captions.json"), "--out", str(doc)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    assert [(r["arch"], r["precision"]) for r in rows] == [(a, p) for a in ("fc", "updown", "transformer")
                                                           for p in ("fp32", "bf16")]
    for r in rows:
        assert r["images"] == 4 and r["peak_gpu_gb"] is None and r["reward"] == "CiderDReward", r
        assert all(r[k] > 0 for k in ("samples_per_s", "sample_s", "reward_s", "backward_s", "gflop_per_step")), r
        assert r["sample_s"] + r["reward_s"] + r["backward_s"] <= r["step_s"]
    text = doc.read_text()
    assert "no GPU: on the CPU (--device cpu)" in text and "the captions of captions.json, 17 words" in text
    assert len([line for line in text.splitlines() if line.startswith("| transformer | 4 x 5 |")]) == 2


@pytest.mark.slow
def test_bench_scale_runs_at_a_tiny_size(tmp_path):
    """make bench-scale's script end to end on a small store, in two calls: the reader's two arms (in
    turns) and the GPU section's code path on the CPU; then the COCO-size part alone, the others' tables
    kept from results.json. (The part of 2 processes against 2 threads: the test below.)"""
    doc = tmp_path / "BENCHMARKS.md"

    def bench(*extra: str) -> list[str]:
        done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_scale.py"), "--images", "1200", "--regions", "3",
                               "--dim", "16", "--steps", "8", "--rounds", "2", "--memory-images", "500", "--out",
                               str(tmp_path / "scale"), "--gpu-device", "cpu", "--gpu-steps", "3", "--doc", str(doc),
                               "--set", "model.embed_dim=32", "model.hidden_dim=32", "model.att_hidden_dim=32", *extra],
                              capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        return doc.read_text().splitlines()

    def table_rows(lines: list[str]) -> list[str]:
        return [line for line in lines if line.startswith(("| xe ", "| scst "))]

    first = bench("--parts", "reader,gpu")
    assert "Part `coco`: not measured yet." in first and len(table_rows(first)) == 2
    saved = json.loads((tmp_path / "scale" / "results.json").read_text())
    assert sorted(saved) == ["gpu", "reader"]

    lines = bench("--parts", "coco")  # the other parts' tables come back unchanged from results.json
    rows = table_rows(lines)
    assert rows[2:] == table_rows(first)
    assert json.loads((tmp_path / "scale" / "results.json").read_text())["reader"] == saved["reader"]
    assert len(rows) == 4 and all(row.count(" GB |") == 1 for row in rows)
    for row in rows[2:]:  # the reader: out of core, in memory, their ratio and the 2 turns' ratios
        lazy, memory, ratio, turns = (cell.strip() for cell in row.split("|")[2:6])
        a, b = float(lazy.rstrip(" s")), float(memory.rstrip(" s"))  # shown to 3 decimals: +-5e-4 each
        # the ratio of the unrounded times (itself shown to 3 decimals) lies between the extremes the rounding allows
        assert (a - 5e-4) / (b + 5e-4) - 5e-4 <= float(ratio) <= (a + 5e-4) / (b - 5e-4) + 5e-4
        assert len(turns.split(", ")) == 3
    models = [line.split("|")[1].strip() for line in lines if line.startswith(("| fc ", "| updown ", "| transformer "))]
    assert models == ["fc", "updown", "transformer"]
    text = "\n".join(lines)  # the sections name what ran, --set included
    assert "UpDown at hidden 32, XE 50 images x 5 captions a step, SCST 50 images x 5 samples: 8 steps" in text
    assert "at 50 images x 5 samples, hidden 32, 3 steps, device=cpu" in text
    assert not (tmp_path / "scale" / "store").exists()  # the big store is deleted unless --keep
    # --set reaches every training run
    assert all(json.loads((tmp_path / "scale" / run / "config.json").read_text())["model"]["hidden_dim"] == 32
               for run in ("lazy_scst", "first_memory_xe", "first_lazy_scst"))


def test_bench_scale_processes_part_trains_each_layout(tmp_path, monkeypatch):
    """The part of 2 processes x 1 thread against 1 process x 2 threads: XE, then SCST from its last
    checkpoint, in each layout on the shapes set, every run with the --set overrides; the table's samples a
    second from the runs' median steps and the captions a step their config.json records, which the text
    names too. Each run is `rlcap train` in a child process,
    which the test above runs; `nproc=2` starts torchrun (tests/train/test_distributed.py)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_scale
    finally:
        sys.path.remove(str(BENCHMARKS))
    calls = []

    def train(recipe, overrides, out, fresh=True):
        calls.append((recipe, overrides, out))
        xe = recipe == "shapes_xe.yaml"  # as config.json records a run of the recipe with model.hidden_dim=32
        config = {"algorithm": "xe" if xe else "scst", "model": {"arch": "updown", "hidden_dim": 32},
                  "xe": {"batch_size": 50}, "data": {"seq_per_img": 5}, "rl": {"batch_size": 40, "n_samples": 4}}
        return {"step_s": 0.5 if "nproc=2" in overrides else 1.25, "peak_rss_gb": 0.1, "seconds": 1.0,
                "settings": bench_scale.run_settings(config)}

    monkeypatch.setattr(bench_scale, "train", train)
    monkeypatch.setattr(bench_scale, "shapes_store", lambda folder, images: (folder / "d.json", folder / "f.h5"))
    result = bench_scale.processes_against_threads(tmp_path, 3, ["model.hidden_dim=32"], 100)
    assert [(recipe, out.name) for recipe, _, out in calls] == [
        ("shapes_xe.yaml", "1x2_xe"), ("shapes_scst.yaml", "1x2_scst"),
        ("shapes_xe.yaml", "2x1_xe"), ("shapes_scst.yaml", "2x1_scst")]
    for recipe, overrides, out in calls:
        assert {"max_steps=3", "model.hidden_dim=32", f"data.dataset={tmp_path / 'd.json'}"} <= set(overrides)
        assert ({"threads=1", "nproc=2"} if out.name.startswith("2x1") else {"threads=2"}) <= set(overrides)
        if recipe == "shapes_scst.yaml":
            assert f"init_from={tmp_path / out.name.replace('scst', 'xe')}/last" in overrides
    rows = bench_scale.processes_rows(result, 3, 100)
    assert "| xe | 200 samples/s | 500 samples/s | 2.50 |" in rows and "on 100 shapes images" in rows[2]
    assert "| scst | 128 samples/s | 320 samples/s | 2.50 |" in rows  # 40 images x 4 samples a step
    assert "UpDown at hidden 32, XE 50 images x 5 captions a step, SCST 40 images x 4 samples)" in rows[2]


@pytest.mark.slow
def test_bench_hf_runs_at_the_tiny_size(tmp_path):
    """make bench-hf's script end to end on a tiny GIT captioner (tokenizer and CIDEr-D references from a
    4-image caption file): one round of the three samplers and one SCST step, in a child process; the JSON
    line holds every figure of the row, positive, both samplers' captions of at most 16 tokens; the document
    gets the CPU table, the table of XE and SCST with and without autograd through sampling (one child each)
    and, where CUDA is absent, the GPU section saying so."""
    import torch

    words = ["a dog runs on the grass", "two cats sleep on a red sofa", "a man rides a bike down the street",
             "a plate of food on a wooden table"]
    coco = tmp_path / "coco.json"
    coco.write_text(json.dumps([{"image_id": 100 + i, "references": [w, " ".join(reversed(w.split()))]}
                                for i, w in enumerate(words)]))
    doc = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_hf.py"), "--configs", "tiny:2", "--gpu-configs",
                           "tiny:2", "--scored-configs", "tiny:2", "--gpu-scored-configs", "tiny:2", "--micro-batch",
                           "4", "--repeats", "1", "--steps", "1", "--budget", "0", "--coco", str(coco),
                           "--vlm-families", "qwen2_vl,florence2", "--vlm-size", "tiny", "--vlm-images", "2",
                           "--out", str(doc)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    modes = [f"tiny_2x5_{mode}" for mode in ("xe", "autograd", "scored", "scored_mb")]
    assert result["family"] == "git" and list(result["cpu"]) == ["tiny_2x5", *modes]
    row = result["cpu"]["tiny_2x5"]
    speeds = ("rlcap_samples_per_s", "generate_samples_per_s", "rlcap_grad_samples_per_s", "scst_samples_per_s",
              "scst_sample_s", "scst_reward_s", "scst_backward_s", "peak_rss_mb")
    assert all(row[k] > 0 for k in speeds), row
    assert all(0 < row[k] <= 16 for k in ("rlcap_tokens_per_caption", "generate_tokens_per_caption")), row
    text = doc.read_text()
    assert "<!-- bench-hf:start -->" in text and "--configs tiny:2" in text
    assert len([line for line in text.splitlines() if line.startswith("| tiny | 2 x 5 |")]) == 5
    # the second table: XE, SCST with autograd through sampling, sampled then scored (and in micro-batches of 4),
    # each in its own process; the goals read from its figures
    assert all(result["cpu"][m]["samples_per_s"] > 0 and result["cpu"][m]["peak_rss_mb"] > 0 for m in modes)
    assert result["cpu"]["tiny_2x5_scored_mb"]["micro_batch"] == 4
    assert "| tiny | 2 x 5 | SCST, sample then score, rl.micro_batch=4 |" in text and "--micro-batch 4" in text
    assert "tiny 2 x 5, rl.micro_batch=4: peak " in text and "x autograd's samples/s (" in text
    # the VLM part: a decoder-only family (generate reading the stored tokens as mm_encoder_outputs) and Florence-2
    # (the stored map as pixel_values), each side's speed and caption length, the goal read from them
    assert list(result["vlm"]) == ["qwen2_vl_tiny_2x5", "florence2_tiny_2x5"]
    for figures in result["vlm"].values():
        assert figures["rlcap_samples_per_s"] > 0 and figures["generate_samples_per_s"] > 0, figures
        assert all(0 < figures[f"{side}_tokens_per_caption"] <= 16 for side in ("rlcap", "generate")), figures
    assert "<!-- bench-hf-vlm:start -->" in text and "--vlm-families 'qwen2_vl,florence2' --vlm-size tiny" in text
    assert len([line for line in text.splitlines() if line.startswith(("| qwen2_vl | 2 x 5 |",
                                                                        "| florence2 | 2 x 5 |"))]) == 2
    florence = result["vlm"]["florence2_tiny_2x5"]
    ratio = florence["rlcap_samples_per_s"] / florence["generate_samples_per_s"]
    stated = re.search(r"florence2 ([0-9.]+)x \((met|not met)\)", text)
    assert stated and abs(float(stated[1]) - ratio) < 0.011, (stated, ratio)
    assert abs(ratio - 1) < 0.01 or (stated[2] == "met") == (ratio > 1), (stated, ratio)
    if torch.cuda.is_available():  # the GPU table: a row in fp32, one under bf16 autocast
        assert all(f"| tiny | {p} | 2 x 5 |" in text for p in ("fp32", "bf16")) and list(result["cuda"])[:2] == [
            "tiny_2x5", "tiny_2x5_bf16"]
        assert {f"{m}".replace("tiny_2x5", f"tiny_2x5{p}") for m in modes for p in ("", "_bf16")} <= set(result["cuda"])
    else:
        assert "<!-- bench-hf-gpu:start -->\n### GPU\n\nNot run" in text


@pytest.mark.slow
def test_smolvlm_shapes_builds_the_published_widths(tmp_path):
    """SmolVLM-256M's widths (one decoder layer kept): the config says them, the tokenizer covers the published
    vocabulary, and the processor puts 64 image tokens (one 512-px tile, pixel shuffle 4) in a prompt."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from smolvlm_shapes import build_smolvlm
    finally:
        sys.path.remove(str(BENCHMARKS))
    import transformers as t
    from PIL import Image

    folder = tmp_path / "smolvlm"
    count = build_smolvlm(folder, ["a red circle", "a big blue square"] * 8, "smolvlm-256m", layers=1)
    config = t.AutoConfig.from_pretrained(folder)
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.intermediate_size, text.num_hidden_layers, text.num_key_value_heads,
            text.vocab_size) == (576, 1536, 1, 3, 49280)
    assert (vision.hidden_size, vision.num_hidden_layers, vision.image_size, vision.patch_size) == (768, 12, 512, 16)
    assert config.scale_factor == 4
    assert len(t.AutoTokenizer.from_pretrained(folder)) == 49280
    model = t.AutoModelForImageTextToText.from_pretrained(folder)
    assert sum(p.numel() for p in model.parameters()) == count
    processor = t.AutoProcessor.from_pretrained(folder)
    inputs = processor(text=[processor.image_token], images=[[Image.new("RGB", (640, 480))]], return_tensors="pt")
    assert int((inputs["input_ids"] == config.image_token_id).sum()) == 64

"""The moving-shapes video benchmark: clips, their states frame by frame, the annotators, the files."""

import json
import random
import statistics

import pytest

from rlcap.data.readers import read_dataset
from rlcap.data.synthetic.clip_captions import ANNOTATORS, describe
from rlcap.data.synthetic.clips import Clip, Event, MIN_EVENT_FRAMES, TRAVEL, sample_clip, state_at
from rlcap.data.synthetic.moving import MovingShapesConfig, generate_moving_shapes, is_complete
from rlcap.data.synthetic.scenes import SceneObject
from rlcap.errors import ConfigError
from rlcap.metrics import tokenize

CIRCLE = SceneObject("circle", "red", "medium", None, 0.5, 0.5, 0.135)
SQUARE = SceneObject("square", "blue", "small", None, 0.2, 0.5, 0.095)


def test_states_follow_the_events():
    clip = Clip("white", (CIRCLE, SQUARE), (Event(0, "move", "right", 0, 10), Event(1, "grow", "", 0, 10, True),
                                             Event(0, "recolour", "green", 10, 20), Event(1, "disappear", "", 20, 30)), 30)
    assert state_at(clip, 0).objects[0].x == pytest.approx(0.5 + TRAVEL / 10)  # frame 0 is 1/10 of the move
    end = state_at(clip, 9).objects
    assert end[0].x == pytest.approx(0.8) and end[1].radius == pytest.approx(0.095 * 1.6)
    assert [o.colour for o in state_at(clip, 13).objects] == ["red", "blue"]  # 4 of its 10 frames done
    assert [o.colour for o in state_at(clip, 14).objects] == ["green", "blue"]  # half: the colour changes
    assert len(state_at(clip, 25).objects) == 1 and len(state_at(clip, 23).objects) == 2


def test_sampled_clips_are_well_formed():
    for seed in range(200):
        rng = random.Random(seed)
        clip = sample_clip(rng, rng.randint(16, 32))
        assert 1 <= len(clip.objects) <= 3 and 2 <= len(clip.events) <= 4
        for e in clip.events:
            assert e.end - e.start >= MIN_EVENT_FRAMES and 0 <= e.start < e.end <= clip.frames
        spans = {}
        for e in clip.events:
            spans.setdefault((e.start, e.end), []).append(e.obj)
        assert all(len(o) == len(set(o)) for o in spans.values())  # one action per object at a time
        assert all(e.action != "appear" or k == 0 for k, e in enumerate(clip.events))
        assert all(e.action != "disappear" or k == len(clip.events) - 1 for k, e in enumerate(clip.events))


def test_annotators_tell_every_event_in_order():
    clip = Clip("grey", (CIRCLE, SQUARE), (Event(0, "move", "left", 0, 8), Event(1, "recolour", "green", 8, 16),
                                            Event(0, "grow", "", 8, 16, True)), 16)
    for a in ANNOTATORS:
        text, starts = describe(clip, a, random.Random(3))
        words = tokenize(text)
        assert len(starts) == 3 and starts == sorted(starts)
        event_words = [" ".join(words[s:e]) for s, e in zip(starts, [*starts[1:], len(words)])]
        assert "circle" in event_words[0] or "disc" in event_words[0] or "round" in event_words[0]
        assert "green" in event_words[1] and event_words[2].split()[0] in ("while", "as")
    lengths = []
    for seed in range(300):
        rng = random.Random(seed)
        c = sample_clip(rng, 24)
        lengths += [len(tokenize(describe(c, a, rng)[0])) for a in ANNOTATORS]
    assert statistics.mean(lengths) >= 18  # issue 16: at least 18 words on average


def test_generated_folder_reads_as_msrvtt_and_is_reproducible(tmp_path):
    config = MovingShapesConfig(n_train=6, n_val=2, n_test=2, workers=1)
    path = generate_moving_shapes(config, tmp_path / "a")
    assert is_complete(config, tmp_path / "a")
    records = read_dataset(path)
    assert [r.split for r in records] == ["train"] * 6 + ["val"] * 2 + ["test"] * 2
    assert all(len(r.captions) == 5 and (tmp_path / "a" / r.filename).is_file() for r in records)
    again = generate_moving_shapes(MovingShapesConfig(n_train=6, n_val=2, n_test=2, workers=2), tmp_path / "b")
    first, second = json.loads(path.read_text()), json.loads(again.read_text())
    assert first == second  # the same clips and captions whatever the workers
    with pytest.raises(ConfigError, match="max_objects"):
        MovingShapesConfig(max_objects=4)


def test_a_folder_of_other_settings_is_refused_by_bench(tmp_path, capsys):
    """`rlcap bench --benchmark moving-shapes --data DIR` never regenerates a user's clips of other
    settings unless asked (--regenerate); the folder is left as it was."""
    from rlcap.cli import main

    data = tmp_path / "clips"
    generate_moving_shapes(MovingShapesConfig(n_train=2, n_val=1, n_test=1, workers=1), data)
    before = {p: p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert main(["bench", "--benchmark", "moving-shapes", "--methods", "xe", "--out", str(tmp_path / "out"),
                 "--data", str(data)]) == 2
    assert capsys.readouterr().err == (
        f"rlcap bench: error: {data} holds moving-shapes data generated with other settings (n_train 2 -> 6000, "
        f"n_val 1 -> 500, n_test 1 -> 500); give --regenerate to replace it (only the files rlcap generated there "
        f"are removed), or another data folder\n")
    assert {p: p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()} == before
    assert not (tmp_path / "out").exists()


def test_clips_that_no_manifest_claims_are_not_overwritten(tmp_path):
    from rlcap.errors import DataError

    data = tmp_path / "mine"
    (data / "videos").mkdir(parents=True)
    (data / "videos" / "video0.mp4").write_bytes(b"my holiday")
    with pytest.raises(DataError) as err:
        generate_moving_shapes(MovingShapesConfig(n_train=1, n_val=0, n_test=1, workers=1), data)
    assert str(err.value) == (f"{data} holds videos/video0.mp4 but no manifest.json: it was not generated by rlcap "
                              f"here, so generating would overwrite it; give a folder of its own to the moving-shapes "
                              f"data")
    assert (data / "videos" / "video0.mp4").read_bytes() == b"my holiday" and not (data / "manifest.json").exists()


def test_a_killed_generation_is_finished_by_the_next_run(tmp_path):
    """The manifest is written first (complete: false), so a folder left by a killed run is rlcap's and
    the next run completes it rather than refusing it."""
    config = MovingShapesConfig(n_train=2, n_val=1, n_test=1, workers=1)
    data = tmp_path / "clips"
    generate_moving_shapes(config, data)
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["complete"] is True
    (data / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    (data / "annotations.json").unlink()
    assert not is_complete(config, data)
    generate_moving_shapes(config, data)
    assert is_complete(config, data)

"""benchmarks/bench_rewards.py's reading of a caption against its picture (the phrase table of make bench-rewards):
the count a caption states, its relation and an unfinished end, on captions counted by hand; the probe that appends
the true count; the goals read for every summed row; each summed row's settings."""

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rlcap.data.qa import ABSTAIN

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    import bench_rewards
finally:
    sys.path.pop(0)


@pytest.mark.parametrize(("caption", "n_objects", "count"), [
    ("a red circle below a blue square with two other shapes", 4, True),  # 2 named + 2
    ("a red circle below a blue square with two other shapes", 3, False),
    ("a large red circle with another shape", 2, True),  # an adjective before the shape
    ("two small striped red circles and a star with another object", 4, True),  # "two ... circles": 2
    ("two small striped red circles and a star with another object", 3, False),
    ("a red circle with some other shapes", 3, "unread"),  # no number stated
    ("a red circle to the left of a blue square", 2, None),  # no count phrase
])
def test_the_count_a_caption_states(caption, n_objects, count):
    assert bench_rewards.read_caption(caption, n_objects)["count"] == count


def test_the_relation_and_an_unfinished_end():
    read = bench_rewards.read_caption("a pink cross to the right of a purple circle on a", 2)
    assert read["relation"] == "right"  # "to the right of", not the shorter "right of" counted apart
    assert read["unfinished"]
    assert bench_rewards.read_caption("a green star next to a red heart", 2) == {
        "count": None, "relation": "diagonal", "unfinished": False, "twice": None}
    assert bench_rewards.read_caption("a red star below a blue star", 2)["relation"] == "below"


def _row(qa, cider, template):
    return {"QA-acc": qa, "CIDEr": cider, "Template": template, "Coverage": 0.8, "CHAIR_i": 0.02}


def test_the_goals_read_every_summed_row_run():
    qs = bench_rewards.SETS["main"]
    # (the QA row's other seeds and the mask run at 224 px alone: test_at_224_px_...)
    assert qs.rows.split(",")[-4:] == ["xe_box", "scst_box", "scst_qa_box", "scst_qa_cider_16_box"]
    assert qs.rows.split(",")[-16:-4] == ["scst_qa", "scst_qa_seed2", "scst_qa_len", "scst_qa_cider",
                                          "scst_qa_cider_spread", "scst_qa_cider_mid", "scst_qa_cider_16",
                                          "scst_qa_cider_16_seed2", "scst_qa_cider_heavy", "grpo_qa_cider_gdpo",
                                          "grpo_qa_cider_gdpo_heavy", "grpo_qa"]
    found = {"scst_end": _row(0.60, 2.0, 0.7), "scst_qa": _row(0.70, 1.6, 0.3),
             "scst_qa_cider": _row(0.61, 2.0, 0.7), "scst_qa_cider_spread": _row(0.66, 1.92, 0.5)}
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert "scst_qa_cider keeps 100.0% of CIDEr-D SCST's CIDEr-D (goal: at least 95%) and 10% of the QA gain" in lines
    assert "scst_qa_cider_spread keeps 96.0% of CIDEr-D SCST's CIDEr-D (goal: at least 95%) and 60% of" in lines
    assert "scst_qa_cider 0.700, scst_qa_cider_spread 0.500 (goal" in lines
    assert "scst_qa_len" not in lines  # not run: not read
    found["scst_qa_len"] = _row(0.69, 1.9, 0.2) | {"Coverage": 0.85}
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert "- scst_qa_len against CIDEr-D SCST: held-out QA-acc 0.690 against 0.600 (+15.0% relative" in lines
    assert "- Coverage: scst_qa_len 0.850 against CIDEr-D SCST 0.800 (goal: higher)." in lines
    assert "QA-utility SCST 0.300, scst_qa_len 0.200, scst_qa_cider 0.700" in lines
    # the QA gain is scst_qa's, whichever variants ran
    assert "scst_qa_cider keeps 100.0% of CIDEr-D SCST's CIDEr-D (goal: at least 95%) and 10% of" in lines
    del found["scst_qa_cider"], found["scst_qa_cider_spread"]
    assert ("No summed reward (scst_qa_cider, scst_qa_cider_spread, scst_qa_cider_mid, scst_qa_cider_16, "
            "scst_qa_cider_16_seed2, scst_qa_cider_heavy, grpo_qa_cider_gdpo, grpo_qa_cider_gdpo_heavy) was "
            "run") in "\n".join(bench_rewards.goals(found, qs))
    # the other question set has no second seed, length, spread, mid, heavy or GDPO row
    assert bench_rewards.SETS["every"].rows.endswith("scst_qa_every,scst_qa_cider_every,grpo_qa_every")


def test_the_joined_sets_sampled_rows_are_read_against_the_goals():
    """The joined set's rows with the reader sampling at 0.6 (and the abstain row) are read against CIDEr-D SCST, and
    the GRPO one against CIDEr-D GRPO too, as the set's QA rows are; a row not run is left out."""
    qs = bench_rewards.at_size(bench_rewards.SETS["joined"], 224)
    found = {"scst_box": _row(0.60, 2.0, 0.7), "scst_qa_box_joined": _row(0.65, 1.8, 0.6),
             "grpo_box": _row(0.59, 2.0, 0.8), "scst_qa_box_joined_t06": _row(0.66, 1.9, 0.5) | {"Coverage": 0.9}}
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_t06 against CIDEr-D SCST: held-out QA-acc 0.660 against 0.600 (+10.0% relative"
            in lines)
    assert "- Coverage: scst_qa_box_joined_t06 0.900 against CIDEr-D SCST 0.800 (goal: higher)." in lines
    assert "QA-utility SCST 0.600, scst_qa_box_joined_t06 0.500 (goal" in lines
    assert "grpo_qa_box_joined_t06" not in lines  # not run: not read
    found["grpo_qa_box_joined_t06"] = _row(0.63, 1.5, 0.75)
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert "- grpo_qa_box_joined_t06 against CIDEr-D SCST: held-out QA-acc 0.630 against 0.600 (+5.0%" in lines
    assert "- grpo_qa_box_joined_t06 against CIDEr-D GRPO: held-out QA-acc 0.630 against 0.590 (+6.8%" in lines
    assert "scst_qa_box_joined_abstain_t06" not in lines
    found["scst_qa_box_joined_abstain_t06"] = _row(0.67, 2.1, 0.4)  # the abstain row: against CIDEr-D SCST too
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert "- scst_qa_box_joined_abstain_t06 against CIDEr-D SCST: held-out QA-acc 0.670 against 0.600 (+11.7%" in lines
    found["grpo_qa_box_joined_abstain_t06"] = _row(0.62, 1.5, 0.75)
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert "- grpo_qa_box_joined_abstain_t06 against CIDEr-D GRPO: held-out QA-acc 0.620 against 0.590 (+5.1%" in lines
    found["scst_qa_box_joined_abstain_t06_seed2"] = _row(0.68, 2.1, 0.4)  # its other seed: read as a variant
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_abstain_t06_seed2 against CIDEr-D SCST: held-out QA-acc 0.680 against 0.600 "
            "(+13.3%" in lines)
    assert "every_abstain" not in lines
    found["scst_qa_box_joined_every_abstain_t06"] = _row(0.64, 2.0, 0.2) | {"Coverage": 0.95}  # every shape's
    lines = "\n".join(bench_rewards.goals(found, qs))  # questions: against CIDEr-D SCST too, and not against GRPO
    assert ("- scst_qa_box_joined_every_abstain_t06 against CIDEr-D SCST: held-out QA-acc 0.640 against 0.600 (+6.7%"
            in lines)
    assert "- Coverage: scst_qa_box_joined_every_abstain_t06 0.950 against CIDEr-D SCST 0.800 (goal: higher)." in lines
    assert "scst_qa_box_joined_every_abstain_t06 against CIDEr-D GRPO" not in lines
    assert "_rep_t06" not in lines
    found["scst_qa_box_joined_every_abstain_rep_t06"] = _row(0.66, 2.2, 0.3)  # with the repetition penalty
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_every_abstain_rep_t06 against CIDEr-D SCST: held-out QA-acc 0.660 against 0.600 "
            "(+10.0%" in lines)
    found["scst_qa_box_joined_main_every_abstain_rep03_t06"] = _row(0.67, 2.2, 0.3)  # both sets' questions
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_main_every_abstain_rep03_t06 against CIDEr-D SCST: held-out QA-acc 0.670 against "
            "0.600 (+11.7%" in lines)
    assert "pair_every" not in lines
    found["scst_qa_box_joined_pair_every_abstain_rep03_t06"] = _row(0.68, 2.2, 0.3)  # the count asked once
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_pair_every_abstain_rep03_t06 against CIDEr-D SCST: held-out QA-acc 0.680 against "
            "0.600 (+13.3%" in lines)
    assert "_len24" not in lines
    found["scst_qa_box_joined_main_every_abstain_rep03_t06_len24"] = _row(0.69, 2.2, 0.3)  # captions up to 24 words
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_main_every_abstain_rep03_t06_len24 against CIDEr-D SCST: held-out QA-acc 0.690 "
            "against 0.600 (+15.0%" in lines)
    assert "_bf16reader" not in lines
    found["scst_qa_box_joined_main_every_abstain_rep03_t06_bf16reader"] = _row(0.63, 2.2, 0.3)  # its reader in bf16
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert ("- scst_qa_box_joined_main_every_abstain_rep03_t06_bf16reader against CIDEr-D SCST: held-out QA-acc 0.630 "
            "against 0.600 (+5.0%" in lines)


def test_one_shape_named_twice_against_the_picture():
    from collections import Counter

    one_heart = Counter({("brown", "heart"): 1, ("blue", "triangle"): 1})
    two_hearts = Counter({("brown", "heart"): 2})
    caption = "a brown heart below a brown heart with two other shapes"
    assert bench_rewards.read_caption(caption, 4, one_heart)["twice"] is True  # the picture holds one
    assert bench_rewards.read_caption(caption, 4, two_hearts)["twice"] is False  # it holds two: a true caption
    assert bench_rewards.read_caption("a large brown heart below a small brown heart", 2, one_heart)["twice"] is True
    assert bench_rewards.read_caption("a brown heart below a blue triangle", 2, one_heart)["twice"] is None
    assert bench_rewards.read_caption("a violet circle below a purple circle", 2,
                                      Counter({("purple", "circle"): 1}))["twice"] is True  # colour synonyms
    assert bench_rewards.read_caption(caption, 4)["twice"] is None  # no picture given: unread


def test_counted_appends_the_true_count_as_the_qa_rows_word_it():
    assert bench_rewards.counted("a red star below a blue circle", 4) == \
        "a red star below a blue circle with two other shapes"
    assert bench_rewards.counted("a red star below a blue circle", 3).endswith(" with another shape")
    assert bench_rewards.counted("two red stars below a blue circle", 3) == "two red stars below a blue circle"
    assert bench_rewards.counted("a red star", 1) == "a red star"
    for caption, n in (("a red star below a blue circle", 4), ("a green heart in the middle", 4)):
        assert bench_rewards.read_caption(bench_rewards.counted(caption, n), n)["count"] is True


@pytest.mark.parametrize("name,algorithm,weights,aggregation", [
    ("scst_qa_cider", "scst", {"cider_d": 1.0, "qa_utility": 1.0}, None),
    ("scst_qa_cider_spread", "scst", {"cider_d": 1.0, "qa_utility": 6.5}, None),
    ("scst_qa_cider_mid", "scst", {"cider_d": 1.0, "qa_utility": 12.0}, None),
    ("scst_qa_cider_16", "scst", {"cider_d": 1.0, "qa_utility": 16.0}, None),
    ("scst_qa_cider_16_seed2", "scst", {"cider_d": 1.0, "qa_utility": 16.0}, None),
    ("scst_qa_cider_heavy", "scst", {"cider_d": 1.0, "qa_utility": 20.0}, None),
    ("grpo_qa_cider_gdpo", "grpo", {"cider_d": 1.0, "qa_utility": 1.0}, "normalize_then_sum"),
    ("grpo_qa_cider_gdpo_heavy", "grpo", {"cider_d": 1.0, "qa_utility": 3.0}, "normalize_then_sum"),
    ("scst_qa_len", "scst", {"qa_utility": 1.0, "length": 0.2}, None),
    ("scst_qa_seed2", "scst", {"qa_utility": 1.0}, None),
])
def test_each_summed_or_length_row_loads_as_its_name_says(name, algorithm, weights, aggregation):
    from rlcap import api
    from rlcap.bench.registry import BENCH_ROWS

    stage = BENCH_ROWS[name].stages[-1]
    assert (stage.recipe, stage.init_from, BENCH_ROWS[name].checkpoint) == (algorithm, "xe", "last")
    cfg = api.load_run_config(str(REPO / "configs" / f"shapes_{stage.recipe}.yaml"), list(stage.overrides))
    assert cfg.reward.weights == weights
    assert cfg.reward.paths["qa_utility"] == "data/shapes/readers/reward"
    if aggregation:
        assert cfg.grpo.aggregation == aggregation and not cfg.grpo.reads("scale")


@pytest.mark.parametrize("first_row, second_row, seed", [("scst_qa", "scst_qa_seed2", 1235),
                                                         ("scst_qa_cider_16", "scst_qa_cider_16_seed2", 1235),
                                                         ("scst_qa_box", "scst_qa_box_seed2", 1235),
                                                         ("scst_qa_box", "scst_qa_box_seed3", 1236)])
def test_a_second_seed_row_is_its_first_but_for_its_seed(first_row, second_row, seed):
    from dataclasses import asdict

    from rlcap import api
    from rlcap.bench.registry import BENCH_ROWS

    def config(name):
        stage = BENCH_ROWS[name].stages[-1]
        return asdict(api.load_run_config(str(REPO / "configs" / f"shapes_{stage.recipe}.yaml"), list(stage.overrides)))

    first, second = config(first_row), config(second_row)
    assert (first["seed"], second["seed"]) == (1234, seed)
    assert BENCH_ROWS[second_row].stages[-1].init_from == BENCH_ROWS[first_row].stages[-1].init_from
    assert {k: v for k, v in first.items() if k != "seed"} == {k: v for k, v in second.items() if k != "seed"}


def test_the_grpo_rows_from_xe_box_differ_from_the_scst_ones_in_their_recipe_alone():
    """grpo_qa_box is scst_qa_box under configs/shapes_grpo.yaml, and grpo_box scst_box: the same start, reward,
    reader, questions and grid boxes, so that each pair compares the two algorithms."""
    from rlcap import api
    from rlcap.bench.registry import BENCH_ROWS

    for grpo, scst in (("grpo_qa_box", "scst_qa_box"), ("grpo_box", "scst_box")):
        g, s = BENCH_ROWS[grpo].stages[-1], BENCH_ROWS[scst].stages[-1]
        assert (g.recipe, s.recipe) == ("grpo", "scst")
        assert (g.init_from, g.overrides, BENCH_ROWS[grpo].checkpoint) == (s.init_from, s.overrides, "last")
        cfg = api.load_run_config(str(REPO / "configs" / "shapes_grpo.yaml"), list(g.overrides))
        assert cfg.algorithm == "grpo" and cfg.model.grid_boxes
        assert cfg.reward.weights == ({"qa_utility": 1.0} if grpo == "grpo_qa_box" else {"cider_d": 1.0})


def test_coverage_by_kinds_against_hand_counted_pictures(monkeypatch):
    from rlcap.data.objects import ObjectTruth
    from rlcap.data.synthetic.objects import shapes_vocabulary
    from rlcap.data.synthetic.scenes import Scene

    def shape(kind, size):
        return {"shape": kind, "colour": "red", "size": size, "texture": None, "x": 0.5, "y": 0.5, "radius": 0.1}

    def scene(*objects):
        return Scene.from_dict({"background": "beige", "objects": list(objects)})

    scenes = {"a": scene(shape("star", "large")), "b": scene(shape("star", "large"), shape("heart", "small")),
              "c": scene(shape("star", "medium"), shape("heart", "small"), shape("circle", "small"),
                         shape("star", "small"))}
    truth = ObjectTruth(shapes_vocabulary(), {i: frozenset(o.shape for o in s.objects) for i, s in scenes.items()},
                        None, False)
    monkeypatch.setattr(bench_rewards, "scenes_of_test", lambda: scenes)
    monkeypatch.setattr(bench_rewards, "objects_of_test", lambda: truth)
    found = bench_rewards.coverage_by_kinds({"row": {
        "a": "A red star.",  # 1 of 1 kind
        "b": "a red star next to a red star",  # 1 of 2 kinds: the small heart left out
        "c": "a red heart beside a red star"}})["row"]  # 2 of 3 kinds: the small circle left out
    assert found["kinds"] == {1: (1, 1.0), 2: (1, 0.5), 3: (1, 2 / 3)}
    assert found["missed_small"] == 1.0  # both shapes left unnamed are small
    assert found["small"] == 4 / 6  # of the six shapes of pictures b and c, four are small
    lines = bench_rewards.coverage_table({"row": found})
    assert lines[0].startswith("| row | 1 kind (1 pictures) | 2 kinds (1 pictures) | 3 kinds (1 pictures) |")
    assert lines[2] == "| row | 1.000 | 0.500 | 0.667 | 1.000 |"


def test_the_boxed_rows_are_read_against_their_own_cider_d_scst():
    """The rows from xe_box (model.grid_boxes) are read against scst_box, not against the other rows' scst_end;
    without both scst_box and scst_qa_box no boxed goal is read."""
    qs = bench_rewards.SETS["main"]
    found = {"scst_end": _row(0.60, 2.0, 0.7), "scst_qa": _row(0.62, 1.6, 0.3), "scst_box": _row(0.70, 2.2, 0.6)}
    assert "scst_box" not in "\n".join(bench_rewards.goals(found, qs))
    found["scst_qa_box"] = _row(0.84, 2.0, 0.5) | {"Coverage": 0.9}
    lines = "\n".join(bench_rewards.goals(found, qs))
    assert "held-out QA-acc 0.620 against 0.600 (+3.3% relative" in lines  # the rows from xe, as before
    boxed = lines.split("(`scst_box`):")[1]
    assert "held-out QA-acc 0.840 against 0.700 (+20.0% relative; goal: at least +10%)" in boxed
    assert "- Coverage: QA-utility SCST 0.900 against CIDEr-D SCST 0.800 (goal: higher)." in boxed
    assert "No summed reward (scst_qa_cider_16_box) was run" in boxed
    found["scst_qa_cider_16_box"] = _row(0.77, 2.145, 0.55)
    boxed = "\n".join(bench_rewards.goals(found, qs)).split("(`scst_box`):")[1]
    assert "scst_qa_cider_16_box keeps 97.5% of CIDEr-D SCST's CIDEr-D (goal: at least 95%) and 50% of the QA" in boxed
    # the masked utility is a variant of the QA row: read against the QA row's goals, not the summed ones
    found["scst_qa_mask_box"] = _row(0.80, 1.9, 0.35) | {"Coverage": 0.7}
    boxed = "\n".join(bench_rewards.goals(found, qs)).split("(`scst_box`):")[1]
    assert "- scst_qa_mask_box against CIDEr-D SCST: held-out QA-acc 0.800 against 0.700 (+14.3% relative" in boxed
    assert "- Coverage: scst_qa_mask_box 0.700 against CIDEr-D SCST 0.800 (goal: higher)." in boxed


def test_the_qa_rows_goals_are_read_from_the_mean_of_its_seeds_too():
    """Each seed of the QA row is read alone, as a variant, and their mean against the one CIDEr-D SCST run; a seed
    not run is left out of the mean, and with no other seed run there is no mean."""
    big = bench_rewards.at_size(bench_rewards.SETS["main"], 224)
    found = {"scst_box": _row(0.60, 2.0, 0.4) | {"Coverage": 0.8},
             "scst_qa_box": _row(0.63, 1.6, 0.3) | {"Coverage": 0.7}}
    assert "over its" not in "\n".join(bench_rewards.goals(found, big))
    found["scst_qa_box_seed2"] = _row(0.69, 1.7, 0.3) | {"Coverage": 0.9}
    lines = bench_rewards.goals(found, big)
    assert "- scst_qa_box_seed2 against CIDEr-D SCST: held-out QA-acc 0.690 against 0.600 (+15.0% relative; goal: " \
           "at least +10%)." in lines
    mean = [line for line in lines if "over its" in line]
    assert mean == ["- QA-utility SCST over its 2 runs (seeds): mean held-out QA-acc 0.660 (+10.0% relative; the "
                    "runs +5.0% to +15.0%; goal: at least +10%); mean Coverage 0.800 against 0.800 (goal: higher); "
                    "mean CHAIR_i 0.0200 against 0.0200 (goal: no higher)."]
    found["scst_qa_box_seed3"] = _row(0.60, 1.7, 0.3) | {"Coverage": 0.8}
    found["scst_qa_mask_box"] = _row(0.50, 1.7, 0.3)
    lines = bench_rewards.goals(found, big)
    assert "over its 3 runs (seeds): mean held-out QA-acc 0.640 (+6.7% relative; the runs +0.0% to +15.0%" \
           in "\n".join(lines)
    # the mean follows the QA row's last seed, before the other variants (the mask is no seed: not in the mean)
    at = [i for i, line in enumerate(lines) if "over its" in line or "scst_qa_box_seed3 against" in line
          or "scst_qa_mask_box against" in line]
    assert [lines[i].split(" ")[1] for i in at] == ["scst_qa_box_seed3", "QA-utility", "scst_qa_mask_box"]


def test_at_224_px_the_boxed_rows_run_alone_in_their_own_folder_and_section():
    main = bench_rewards.SETS["main"]
    big = bench_rewards.at_size(main, 224)
    assert big.out == "runs/bench_rewards_224" and main.out == "runs/bench_rewards"
    assert big.section == "bench-rewards-224" and big.file == main.file and big.readers == main.readers
    assert big.rows == ("xe_box,scst_box,scst_qa_box,scst_qa_box_seed2,scst_qa_box_seed3,scst_qa_mask_box,"
                        "grpo_box,grpo_qa_box,scst_qa_cider_16_box")
    # its goals: the boxed rows' against scst_box, and no line about the rows from xe it does not run
    found = {"scst_box": _row(0.60, 2.0, 0.4), "scst_qa_box": _row(0.66, 1.6, 0.3)}
    lines = bench_rewards.goals(found, big)
    assert "No QA-utility row was run" not in "\n".join(lines)
    assert "- QA-utility SCST against CIDEr-D SCST: held-out QA-acc 0.660 against 0.600 (+10.0% relative; goal: " \
           "at least +10%)." in lines
    assert bench_rewards.at_size(main, 128) is main
    with pytest.raises(SystemExit, match="boxed rows"):
        bench_rewards.at_size(replace(bench_rewards.SETS["every"], at_224=()), 224)


def test_the_questions_about_every_shape_at_224_px():
    """The every set at 224 px: its QA row from the main set's xe_box, beside the same scst_box, in the same folder,
    judged by its own readers; its goals read against scst_box, with no seed, variant or summed row of the main set."""
    every = bench_rewards.at_size(bench_rewards.SETS["every"], 224)
    assert every.rows == "xe_box,scst_box,scst_qa_box_every,grpo_box,grpo_qa_box_every"
    assert (every.out, every.section, every.readers) == ("runs/bench_rewards_224", "bench-rewards-every-224",
                                                         "readers/every")
    from rlcap.bench.qa_rows import QA_EVERY, QA_PATHS
    from rlcap.bench.registry import BENCH_ROWS

    qa, box = BENCH_ROWS["scst_qa_box_every"].stages[-1], BENCH_ROWS["scst_qa_box"].stages[-1]
    assert (qa.recipe, qa.init_from) == (box.recipe, box.init_from) == ("scst", "xe_box")
    assert BENCH_ROWS["scst_qa_box_every"].checkpoint == "last"
    assert qa.overrides == (*box.overrides[:-1], *QA_EVERY) and box.overrides[-1] == QA_PATHS[0]
    found = {"scst_box": _row(0.60, 2.0, 0.4) | {"Coverage": 0.8},
             "scst_qa_box_every": _row(0.69, 1.7, 0.3) | {"Coverage": 0.85},
             "scst_qa_box_seed2": _row(0.50, 1.7, 0.3)}  # the main set's: not read here
    lines = bench_rewards.goals(found, every)
    assert lines[:3] == ["", "The same goals from `xe_box` (model.grid_boxes), against its own CIDEr-D SCST "
                             "(`scst_box`):", ""]
    assert "- QA-utility SCST against CIDEr-D SCST: held-out QA-acc 0.690 against 0.600 (+15.0% relative; goal: " \
           "at least +10%)." in lines
    assert "- Coverage: QA-utility SCST 0.850 against CIDEr-D SCST 0.800 (goal: higher)." in lines
    assert not any("seed2" in line or "No summed reward" in line or " keeps " in line for line in lines)
    # GRPO with the utility: read against CIDEr-D SCST as a variant, and against CIDEr-D GRPO (the main set's grpo_box)
    found |= {"grpo_box": _row(0.64, 2.1, 0.6), "grpo_qa_box_every": _row(0.72, 1.7, 0.2)}
    lines = bench_rewards.goals(found, every)
    assert "- grpo_qa_box_every against CIDEr-D SCST: held-out QA-acc 0.720 against 0.600 (+20.0% relative; goal: " \
           "at least +10%)." in lines
    assert "- grpo_qa_box_every against CIDEr-D GRPO: held-out QA-acc 0.720 against 0.640 (+12.5% relative; goal: " \
           "at least +10%)." in lines
    g, s = BENCH_ROWS["grpo_qa_box_every"].stages[-1], qa
    assert (g.recipe, g.init_from, g.overrides) == ("grpo", s.init_from, s.overrides)


def test_grpo_with_the_utility_is_read_against_cider_d_scst_and_cider_d_grpo():
    """grpo_qa_box is a variant of the QA row (the goals name SCST; [Xing26] trains with GRPO) and is read against
    GRPO with CIDEr-D too; grpo_box is no QA row: it gets no goal line of its own, against either."""
    big = bench_rewards.at_size(bench_rewards.SETS["main"], 224)
    found = {"scst_box": _row(0.60, 2.0, 0.4), "scst_qa_box": _row(0.66, 1.6, 0.3),
             "grpo_qa_box": _row(0.72, 1.7, 0.2) | {"Coverage": 0.7}}
    lines = bench_rewards.goals(found, big)
    assert "- grpo_qa_box against CIDEr-D SCST: held-out QA-acc 0.720 against 0.600 (+20.0% relative; goal: at " \
           "least +10%)." in lines
    assert not any("CIDEr-D GRPO" in line for line in lines)  # grpo_box not run: no line against it
    found["grpo_box"] = _row(0.64, 2.1, 0.6) | {"Coverage": 0.9, "CHAIR_i": 0.01}
    lines = bench_rewards.goals(found, big)
    assert lines[-3:] == [
        "- grpo_qa_box against CIDEr-D GRPO: held-out QA-acc 0.720 against 0.640 (+12.5% relative; goal: at least "
        "+10%).",
        "- Coverage: grpo_qa_box 0.700 against CIDEr-D GRPO 0.900 (goal: higher).",
        "- CHAIR_i: grpo_qa_box 0.0200 against CIDEr-D GRPO 0.0100 (goal: no higher)."]
    assert not any(line.startswith("- grpo_box against") for line in lines)
    assert "grpo_box" not in next(line for line in lines if line.startswith("- Template share"))


def test_another_budget_runs_in_its_own_folder_and_section():
    """--epochs other than EPOCHS: the rows of that budget apart from the 4-epoch ones, and the section's title and
    command say so."""
    big = bench_rewards.at_size(bench_rewards.SETS["main"], 224)
    assert bench_rewards.at_budget(big, bench_rewards.EPOCHS) is big
    longer = bench_rewards.at_budget(big, 8)
    assert (longer.out, longer.section) == ("runs/bench_rewards_224_e8", "bench-rewards-224-e8")
    assert longer.rows == big.rows and longer.file == big.file and longer.readers == big.readers
    args = argparse.Namespace(questions="main", image_size=224, epochs=8, rows="xe_box,scst_box,scst_qa_box")
    assert bench_rewards.heading(args).endswith("on shapes, the pictures encoded at 224 px, 8 RL epochs")
    assert bench_rewards.command_line(args) == (
        "`make bench-rewards IMAGE_SIZE=224 EPOCHS=8` (`python benchmarks/bench_rewards.py --questions main "
        "--image-size 224 --epochs 8 --rows xe_box,scst_box,scst_qa_box`)")
    args = argparse.Namespace(questions="every", image_size=128, epochs=4, rows=None)
    assert bench_rewards.heading(args).endswith("on shapes, questions about every shape")
    assert bench_rewards.command_line(args) == (
        "`make bench-rewards QUESTIONS=every` (`python benchmarks/bench_rewards.py --questions every`)")


def test_the_captions_table_finds_its_references_without_an_xe_stage(tmp_path, monkeypatch):
    """runs/bench_rewards_224 has no stage named xe (its first is xe_box): the table reads the dataset from
    another stage's run."""
    import json

    import bench_shapes_hf

    images = [{"imgid": i, "filename": f"{i}.png", "filepath": "images", "split": split,
               "sentences": [{"tokens": caption.split(), "raw": caption}]}
              for i, split, caption in ((0, "train", "a red star"), (1, "test", "a blue circle below a red star"))]
    (tmp_path / "dataset.json").write_text(json.dumps({"dataset": "shapes", "images": images}))
    out = tmp_path / "runs"
    (out / "xe_box").mkdir(parents=True)
    (out / "xe_box" / "config.json").write_text(json.dumps({"data": {"dataset": str(tmp_path / "dataset.json")}}))
    (out / "captions").mkdir()
    (out / "captions" / "xe_box.json").write_text(json.dumps({"captions": {"1": "a blue circle"}}))
    monkeypatch.setattr(bench_shapes_hf, "REPO", tmp_path)
    assert bench_shapes_hf.captions_table("runs", ["xe_box"])[-1] == \
        "| 1 | a blue circle | a blue circle below a red star |"


def test_the_joined_readers_set_at_224_px(tmp_path, monkeypatch):
    """The joined set: the main questions, readers trained on joined references (--joined 0.5) in their own folder;
    at 224 px the utility under SCST and GRPO with the joined reward reader beside the single-reference reader's rows,
    in the main 224-px folder; its readers are trained with their share and a reader of another share is refused."""
    joined = bench_rewards.at_size(bench_rewards.SETS["joined"], 224)
    assert joined.rows == ("xe_box,scst_box,scst_qa_box,scst_qa_box_joined,grpo_box,grpo_qa_box,grpo_qa_box_joined,"
                           "scst_qa_box_joined_t06,grpo_qa_box_joined_t06,scst_qa_box_joined_abstain_t06,"
                           "grpo_qa_box_joined_abstain_t06,scst_qa_box_joined_abstain_t06_seed2,"
                           "scst_qa_box_joined_every_abstain_t06,"
                           "scst_qa_box_joined_every_abstain_rep_t06,scst_qa_box_joined_main_every_abstain_rep03_t06,"
                           "scst_qa_box_joined_pair_every_abstain_rep03_t06,"
                           "scst_qa_box_joined_main_every_abstain_rep03_t06_len24,"
                           "scst_qa_box_joined_main_every_abstain_rep03_t06_bf16reader")
    assert (joined.file, joined.out, joined.section, joined.readers, joined.joined) == (
        "questions.json", "runs/bench_rewards_224", "bench-rewards-joined-224", "readers/joined", 0.5)
    with pytest.raises(SystemExit, match="bench-rewards-joined has no rows at 128 px: give --image-size 224"):
        bench_rewards.at_size(bench_rewards.SETS["joined"], 128)
    from rlcap.bench.qa_rows import QA_JOINED, QA_PATHS
    from rlcap.bench.registry import BENCH_ROWS

    for name in ("scst_qa_box", "grpo_qa_box"):
        row, single = BENCH_ROWS[f"{name}_joined"], BENCH_ROWS[name]
        assert row.stages[:-1] == single.stages[:-1] and row.checkpoint == "last"
        assert row.stages[-1].overrides == (*single.stages[-1].overrides[:-1], *QA_JOINED)
        assert single.stages[-1].overrides[-1] == QA_PATHS[0] and "readers/joined/reward" in QA_JOINED[0]
    # the joined reward read at [Xing26]'s training temperature: the joined SCST row with that one setting added
    for name in ("scst_qa_box", "grpo_qa_box"):
        sampled, joined_row = BENCH_ROWS[f"{name}_joined_t06"], BENCH_ROWS[f"{name}_joined"]
        assert sampled.stages[:-1] == joined_row.stages[:-1] and sampled.checkpoint == "last"
        assert sampled.stages[-1].recipe == joined_row.stages[-1].recipe
        assert sampled.stages[-1].overrides == (*joined_row.stages[-1].overrides[:-1], "reward.qa_temperature=0.6",
                                                *QA_JOINED)
    # and with the abstain option, read by its own reward reader: the sampled row with those two settings
    from rlcap.bench.qa_rows import QA_ABSTAIN_PATHS

    for name in ("scst_qa_box", "grpo_qa_box"):
        abstains, sampled = BENCH_ROWS[f"{name}_joined_abstain_t06"], BENCH_ROWS[f"{name}_joined_t06"]
        assert abstains.stages[:-1] == sampled.stages[:-1] and abstains.checkpoint == "last"
        assert abstains.stages[-1].recipe == sampled.stages[-1].recipe
        assert abstains.stages[-1].overrides == (*sampled.stages[-1].overrides[:-1], "reward.qa_abstain=true",
                                                 *QA_ABSTAIN_PATHS)
    assert "readers/joined/abstain," in QA_ABSTAIN_PATHS[0]
    # the abstaining SCST row again with another seed: that one setting added
    seeded, abstains = BENCH_ROWS["scst_qa_box_joined_abstain_t06_seed2"], BENCH_ROWS["scst_qa_box_joined_abstain_t06"]
    assert seeded.stages[:-1] == abstains.stages[:-1] and seeded.checkpoint == "last"
    assert seeded.stages[-1].overrides == (*abstains.stages[-1].overrides[:-1], "seed=1235", *QA_ABSTAIN_PATHS)
    # and rewarded on the questions about every shape by the abstaining recipe trained on them: the abstaining SCST
    # row with its reader and questions alone changed
    from rlcap.bench.qa_rows import QA_EVERY_ABSTAIN_PATHS

    every, abstains = BENCH_ROWS["scst_qa_box_joined_every_abstain_t06"], BENCH_ROWS["scst_qa_box_joined_abstain_t06"]
    assert every.stages[:-1] == abstains.stages[:-1] and every.checkpoint == "last"
    assert every.stages[-1].recipe == abstains.stages[-1].recipe == "scst"
    assert every.stages[-1].overrides == (*abstains.stages[-1].overrides[:-1], *QA_EVERY_ABSTAIN_PATHS)
    assert ("readers/joined/every_abstain," in QA_EVERY_ABSTAIN_PATHS[0]
            and "qa_file: data/shapes/questions_every.json" in QA_EVERY_ABSTAIN_PATHS[0])
    # and that row with the n-gram repetition penalty beside the utility: its weights alone changed
    from rlcap import api

    repeated = BENCH_ROWS["scst_qa_box_joined_every_abstain_rep_t06"]
    assert repeated.stages[:-1] == every.stages[:-1] and repeated.checkpoint == "last"
    assert [o for o in repeated.stages[-1].overrides if "weights" not in o] == \
        [o for o in every.stages[-1].overrides if "weights" not in o]
    cfg = api.load_run_config(str(REPO / "configs" / "shapes_scst.yaml"), list(repeated.stages[-1].overrides))
    assert cfg.reward.weights == {"qa_utility": 1.0, "repetition": 1.0} and cfg.reward.repetition_ngram == 3
    # and asked both sets' questions by the same reader, the penalty at 0.3: its questions and weights alone changed
    both = BENCH_ROWS["scst_qa_box_joined_main_every_abstain_rep03_t06"]
    assert both.stages[:-1] == every.stages[:-1] and both.checkpoint == "last"
    changed = ("weights", "paths")
    assert [o for o in both.stages[-1].overrides if not any(c in o for c in changed)] == \
        [o for o in every.stages[-1].overrides if not any(c in o for c in changed)]
    cfg = api.load_run_config(str(REPO / "configs" / "shapes_scst.yaml"), list(both.stages[-1].overrides))
    assert cfg.reward.weights == {"qa_utility": 1.0, "repetition": 0.3}
    assert cfg.reward.paths["qa_utility"] == "data/shapes/readers/joined/every_abstain"
    assert cfg.reward.paths["qa_file"] == "data/shapes/questions_main_every.json"
    # and with the count asked once: its question file alone changed
    once = BENCH_ROWS["scst_qa_box_joined_pair_every_abstain_rep03_t06"]
    assert once.stages[:-1] == both.stages[:-1] and once.checkpoint == "last"
    assert [o for o in once.stages[-1].overrides if "paths" not in o] == \
        [o for o in both.stages[-1].overrides if "paths" not in o]
    cfg = api.load_run_config(str(REPO / "configs" / "shapes_scst.yaml"), list(once.stages[-1].overrides))
    assert cfg.reward.paths == {"qa_utility": "data/shapes/readers/joined/every_abstain",
                                "qa_file": "data/shapes/questions_pair_every.json"}
    # and with captions of up to 24 words, sampled and decoded: that cap alone added
    long = BENCH_ROWS["scst_qa_box_joined_main_every_abstain_rep03_t06_len24"]
    assert long.stages[:-1] == both.stages[:-1] and long.checkpoint == "last"
    assert long.stages[-1].overrides == (*both.stages[-1].overrides[:-1], "decode.max_len=24",
                                         both.stages[-1].overrides[-1])
    cfg = api.load_run_config(str(REPO / "configs" / "shapes_scst.yaml"), list(long.stages[-1].overrides))
    assert (cfg.decode.max_len, cfg.data.max_len) == (24, 16)
    assert cfg.reward.paths["qa_file"] == "data/shapes/questions_main_every.json"
    # and with the reader in bf16 while the policy trains in fp32: that setting alone added
    bf16 = BENCH_ROWS["scst_qa_box_joined_main_every_abstain_rep03_t06_bf16reader"]
    assert bf16.stages[:-1] == both.stages[:-1] and bf16.checkpoint == "last"
    assert bf16.stages[-1].overrides == (*both.stages[-1].overrides[:-1], "reward.qa_precision=bf16",
                                         both.stages[-1].overrides[-1])
    cfg = api.load_run_config(str(REPO / "configs" / "shapes_scst.yaml"), list(bf16.stages[-1].overrides))
    assert (cfg.reward.qa_precision, cfg.precision) == ("bf16", "fp32")
    # the readers: each trained with its set's shares, the card's shares checked
    runs = []

    def train(argv, **_):
        folder = Path(argv[argv.index("--out") + 1])
        folder.mkdir(parents=True)
        share, abstain = (float(argv[argv.index(flag) + 1]) for flag in ("--joined", "--abstain"))
        (folder / "reader_card.json").write_text(f'{{"qa": "{Path(argv[argv.index("--qa") + 1]).name}", '
                                                 f'"joined": {share}, '
                                                 f'"abstain": {abstain}, "size": "{argv[argv.index("--size") + 1]}", '
                                                 f'"steps": {argv[argv.index("--steps") + 1]}, '
                                                 f'"seed": {argv[argv.index("--seed") + 1]}}}')
        runs.append(share)

    monkeypatch.setattr(bench_rewards, "DATA", tmp_path)
    monkeypatch.setattr(bench_rewards.subprocess, "run", train)
    cards = bench_rewards.readers(joined)
    assert set(cards) == {"reward", "judge", "judge2", "abstain", "every_abstain"} and runs == [0.5] * 5
    assert (cards["abstain"]["abstain"], cards["abstain"]["size"], cards["reward"]["abstain"]) == (0.25, "small", 0)
    assert (cards["abstain"]["steps"], cards["reward"]["steps"], cards["judge"]["steps"]) == (10000, 5000, 5000)
    assert (cards["every_abstain"]["qa"], cards["every_abstain"]["abstain"], cards["every_abstain"]["steps"]) == (
        "questions_every.json", 0.25, 10000)
    assert {cards[n]["qa"] for n in ("reward", "judge", "judge2", "abstain")} == {"questions.json"}
    assert [(cards[n]["size"], cards[n]["seed"]) for n in bench_rewards.JUDGES] == [("base", 1), ("base", 2)]
    assert bench_rewards.readers(joined)["judge"]["joined"] == 0.5 and runs == [0.5] * 5  # trained once
    (tmp_path / "readers" / "joined" / "abstain" / "reader_card.json").write_text(
        '{"qa": "questions.json", "joined": 0.5, "abstain": 0.25, "steps": 5000}')  # the fifteenth stop's reader
    with pytest.raises(SystemExit, match="trained with --steps 5000, not 10000: remove it"):
        bench_rewards.readers(joined)
    (tmp_path / "readers" / "joined" / "abstain" / "reader_card.json").write_text(
        '{"qa": "questions.json", "joined": 0.5}')  # a reader that never learned to abstain
    with pytest.raises(SystemExit, match="trained with --abstain 0.0, not 0.25: remove it"):
        bench_rewards.readers(joined)
    runs.clear()
    main = bench_rewards.SETS["main"]
    bench_rewards.readers(main)
    assert runs == [0.0, 0.0, 0.0]  # the reward reader and the two judges: no abstaining reader
    (tmp_path / "readers" / "judge" / "reader_card.json").write_text('{"qa": "questions.json", "joined": 0.5}')
    with pytest.raises(SystemExit, match="trained with --joined 0.5, not 0.0: remove it"):
        bench_rewards.readers(main)
    (tmp_path / "readers" / "judge" / "reader_card.json").write_text('{"qa": "questions.json"}')  # before --joined
    assert bench_rewards.readers(main)["judge"] == {"qa": "questions.json"}



def test_the_readers_reach_names_the_complete_description_and_the_references_joined():
    reached = {"reward": {"complete": 0.875, "joined": 0.809}, "judge": {"complete": 0.841, "joined": 0.794}}
    lines = bench_rewards.reach_lines(reached, {})
    assert lines[0].endswith("QA-acc 0.875 (reward reader), 0.841 (judge reader).")
    assert lines[1] == ("- From all of each test picture's references joined into one caption (`join`; the reader "
                        "lines above: from the first alone): QA-acc 0.809 (reward reader), 0.794 (judge reader).")
    assert len(lines) == 2  # no XE or CIDEr-D SCST probe without their rows



def test_the_joined_set_reads_the_single_reference_readers_beside_its_own():
    cards = {"reward": {"test": {"from_reference": 0.754}}, "judge": {"test": {"from_reference": 0.733}},
             "judge2": {"test": {"from_reference": 0.722}}}
    reached = {"reward": {"complete": 0.731, "joined": 0.677}, "judge": {"complete": 0.763, "joined": 0.7},
               "judge2": {"complete": 0.75, "joined": 0.69}}
    assert bench_rewards.single_lines(cards, reached) == [
        "- The main set's readers, trained on single references (`--joined 0`), on the same test pictures: QA-acc "
        "0.754 from a reference, 0.677 from all references joined and 0.731 from the complete description (reward "
        "reader), 0.733 from a reference, 0.700 from all references joined and 0.763 from the complete description "
        "(judge reader), 0.722 from a reference, 0.690 from all references joined and 0.750 from the complete "
        "description (judge2 reader)."]



def test_each_set_has_its_own_heading():
    args = argparse.Namespace(questions="joined", image_size=224, epochs=bench_rewards.EPOCHS)
    assert bench_rewards.heading(args) == ("## Rewards that read the caption: QA utility beside CIDEr-D on shapes, "
                                           "readers trained on joined references, the pictures encoded at 224 px")
    assert {bench_rewards.heading(argparse.Namespace(questions=q, image_size=128, epochs=4))
            for q in bench_rewards.SETS} == {
        "## Rewards that read the caption: QA utility beside CIDEr-D on shapes",
        "## Rewards that read the caption: QA utility beside CIDEr-D on shapes, questions about every shape",
        "## Rewards that read the caption: QA utility beside CIDEr-D on shapes, readers trained on joined references"}


class LiteralReader:
    """A stub reader that answers the first option whose words stand in the caption (the abstain option never),
    and guesses among the others (uniformly: its likeliest letter the first) where none does."""

    device = "cpu"

    def __init__(self):
        self.offered_abstain = []

    def render(self, caption, question, options):
        return json.dumps([caption, list(options)])

    def option_probs(self, prompts, k, temperature=1.0):
        import torch

        rows = []
        for p in prompts:
            caption, options = json.loads(p)
            self.offered_abstain.append(options[-1] == ABSTAIN)
            read = [j for j, o in enumerate(options) if o != ABSTAIN and f" {o} " in f" {caption} "]
            n = len(options) - (options[-1] == ABSTAIN)
            rows.append([(0.9 if j == read[0] else 0.1 / (k - 1)) if read else (1.0 / n if j < n else 0.0)
                         for j in range(k)])
        return torch.tensor(rows)


def test_the_readers_reading_by_kind_and_what_a_count_phrase_earns_from_each(monkeypatch):
    from rlcap.data.qa import QASet
    from rlcap.data.synthetic.questions import dataset_questions
    from rlcap.data.synthetic.scenes import Scene, SceneObject

    def obj(shape, colour, x, y):
        return SceneObject(shape, colour, "medium", None, x, y, 0.1)

    scenes = {"3": Scene("white", (obj("circle", "red", 0.2, 0.5), obj("square", "blue", 0.8, 0.52),
                                   obj("star", "green", 0.5, 0.9))),
              "4": Scene("white", (obj("circle", "red", 0.2, 0.5), obj("square", "blue", 0.8, 0.52),
                                   obj("star", "green", 0.5, 0.9), obj("heart", "pink", 0.5, 0.1))),
              "1": Scene("white", (obj("heart", "orange", 0.2, 0.2),))}
    qa = QASet(dataset_questions([{"imgid": i, "scene": s.to_dict()} for i, s in scenes.items()], 0))
    stubs = {}
    monkeypatch.setattr(bench_rewards, "scenes_of_test", lambda: scenes)
    monkeypatch.setattr(bench_rewards, "reader", lambda name, qs: (stubs.setdefault(name, LiteralReader()), qa))
    joined = bench_rewards.at_size(bench_rewards.SETS["joined"], 224)
    assert bench_rewards.reading(joined) == {"reward": False, "judge": False, "judge2": False, "abstain": True}
    assert bench_rewards.reading(bench_rewards.SETS["main"]) == {"reward": False, "judge": False, "judge2": False}
    found = bench_rewards.reach_by_kind(joined)
    assert set(found) == {"reward", "judge", "judge2", "abstain"}
    for name, row in found.items():
        assert row["count"] == 1.0 and row["complete_many"] == 1.0  # "three shapes: ...", "four shapes: ..."
        assert row["pair"] == 0.25  # no number word: a guess, right at one of the 4 orders
        # "... with another shape" (three shapes): a guess; "... with two other shapes" (four): "two", wrong
        assert row["pair_counted"] == pytest.approx((0.25 + 0.0) / 2)
        assert all(stubs[name].offered_abstain) == (name == "abstain") and any(stubs[name].offered_abstain) == (
            name == "abstain")
    table = bench_rewards.reach_kind_table(found)
    assert table[0].startswith("| reader | colour | kind | count | position | relation | count, 3-4 shapes")
    assert table[2].startswith("| reward | ") and table[2].endswith("| 0.250 | 0.125 | 1.000 |")


def test_the_abstaining_reader_is_named_with_its_option_in_the_reach_lines():
    reached = {"reward": {"complete": 0.875, "joined": 0.809}, "abstain": {"complete": 0.7, "joined": 0.71}}
    assert bench_rewards.reach_lines(reached, {})[0].endswith(
        "QA-acc 0.875 (reward reader), 0.700 (abstain reader, the option offered).")


def test_the_count_probe_reads_the_boxed_cider_d_scst_where_the_set_has_no_scst_end():
    assert bench_rewards.counted_base(["xe_box", "scst_box", "scst_qa_box"]) == "scst_box"
    assert bench_rewards.counted_base(["scst_end", "scst_box"]) == "scst_end"
    assert bench_rewards.counted_base(["xe_box", "scst_qa_box"]) is None
    reached = {"reward": {"complete": 0.875, "joined": 0.809, "base_counted": 0.76},
               "judge": {"complete": 0.841, "joined": 0.794, "base_counted": 0.7505}, "base_counted_cider": 2.639}
    found = {"xe_box": {"QA-acc": 0.682, "CIDEr": 2.72}, "scst_box": {"QA-acc": 0.6839, "CIDEr": 2.748}}
    line = bench_rewards.reach_lines(reached, found)[2]
    assert line.startswith("- From CIDEr-D SCST's captions (scst_box) with the picture's true count appended")
    # 0.7505 / 0.6839 - 1 = 0.0974
    assert "QA-acc 0.760 (reward reader), 0.750 (judge reader) (the judge's +9.7% relative over its own 0.684)" in line
    assert "CIDEr-D 2.639 against its own 2.748" in line
    # with the second judge: the gain is the judges' mean, (0.7505 + 0.7475) / 2 / 0.6839 - 1 = 0.0952
    reached["judge2"] = {"complete": 0.8, "joined": 0.79, "base_counted": 0.7475}
    line = bench_rewards.reach_lines(reached, found)[2]
    assert "0.750 (judge reader), 0.748 (judge2 reader) (the judges' +9.5% relative over its own 0.684)" in line


def test_by_kind_reads_with_the_reader_named(monkeypatch):
    from rlcap.data.qa import QASet
    from rlcap.data.synthetic.questions import dataset_questions
    from rlcap.data.synthetic.scenes import Scene, SceneObject

    scenes = {"7": Scene("white", (SceneObject("circle", "red", "medium", None, 0.2, 0.5, 0.1),
                                   SceneObject("square", "blue", "medium", None, 0.8, 0.52, 0.1)))}
    qa = QASet(dataset_questions([{"imgid": i, "scene": s.to_dict()} for i, s in scenes.items()], 0))
    asked = []

    def reader(name, qs):
        asked.append(name)
        return LiteralReader(), qa

    monkeypatch.setattr(bench_rewards, "reader", reader)
    monkeypatch.setattr(bench_rewards, "captions_of", lambda row, out: {"7": "two shapes: a red circle and a blue "
                                                                              "square"})
    joined = bench_rewards.at_size(bench_rewards.SETS["joined"], 224)
    judged, rewarded = bench_rewards.by_kind(["row"], joined), bench_rewards.by_kind(["row"], joined, "reward")
    assert asked == ["judge", "reward"]
    assert set(rewarded["row"]) == set(bench_rewards.KINDS)
    assert rewarded["row"]["count"] == judged["row"]["count"] == 1.0  # "two" stands in the caption alone
    assert rewarded["row"]["kind"] == judged["row"]["kind"] > 0.25  # the same stub reads the same


class GuessingReader(LiteralReader):
    """A stub reader that reads nothing: every option equally likely (its likeliest letter the first)."""

    def option_probs(self, prompts, k, temperature=1.0):
        import torch

        return torch.full((len(prompts), k), 1.0 / k)


def test_a_rows_qa_acc_is_the_two_judges_mean_each_beside_it(monkeypatch):
    """scores(): QA-acc is the mean of the held-out judges' (a stub that reads the caption and one that guesses),
    each judge's in its own column; the goal line reads the mean and gives each judge's gain."""
    import rlcap.metrics
    from rlcap.data.qa import QASet
    from rlcap.data.synthetic.questions import dataset_questions
    from rlcap.data.synthetic.scenes import Scene, SceneObject

    scenes = {"7": Scene("white", (SceneObject("circle", "red", "medium", None, 0.2, 0.5, 0.1),
                                   SceneObject("square", "blue", "medium", None, 0.8, 0.52, 0.1)))}
    qa = QASet(dataset_questions([{"imgid": i, "scene": s.to_dict()} for i, s in scenes.items()], 0))
    stubs = {"judge": LiteralReader(), "judge2": GuessingReader()}
    asked = []

    def reader(name, qs):
        asked.append(name)
        return stubs[name], qa

    said = {"row": {"7": "two shapes: a red circle and a blue square"}, "base": {"7": ""}}
    monkeypatch.setattr(bench_rewards, "reader", reader)
    monkeypatch.setattr(bench_rewards, "captions_of", lambda row, out: said[row])
    monkeypatch.setattr(bench_rewards, "refs_of_test", lambda: {"7": ["a red circle"]})
    monkeypatch.setattr(bench_rewards, "objects_of_test", dict)
    monkeypatch.setattr(rlcap.metrics, "score_captions",
                        lambda refs, caps, metrics, objects: argparse.Namespace(corpus={m: 0.5 for m in metrics}))
    found = bench_rewards.scores(["row", "base"], bench_rewards.SETS["main"])
    assert asked == ["judge", "judge2"] * 2
    literal, guessed = found["row"]["QA-acc judge"], found["row"]["QA-acc judge2"]
    chance = found["base"]["QA-acc judge"]  # the empty caption: both guess
    assert found["base"]["QA-acc judge2"] == chance == guessed < 0.5 < literal  # the literal reader reads the colours,
    assert found["row"]["QA-acc"] == pytest.approx((literal + guessed) / 2)  # kinds and count stated
    assert bench_rewards.table(found)[0].startswith("| row | QA-acc | QA-acc judge | QA-acc judge2 | ")
    line = bench_rewards.row_goal_lines("row", found["row"], found["base"])[0]
    gain = (literal + guessed) / 2 / chance - 1
    assert line == (f"- row against CIDEr-D SCST: held-out QA-acc (the judges' mean) {found['row']['QA-acc']:.3f} "
                    f"against {chance:.3f} ({gain:+.1%} relative; judge {literal / chance - 1:+.1%}, judge2 +0.0%; "
                    "goal: at least +10%).")


def test_rows_run_without_the_qa_row_are_read_against_the_goals_alone():
    """--rows with the set's abstaining rows but not its QA row (scst_qa_box_joined): those rows are still read
    against CIDEr-D SCST, and the line says the QA row was not run; with no QA row of any kind, no goal is read."""
    qs = bench_rewards.at_size(bench_rewards.SETS["joined"], 224)
    found = {"xe_box": _row(0.60, 2.0, 0.2), "scst_box": _row(0.60, 2.0, 0.7),
             "scst_qa_box_joined_abstain_t06": _row(0.66, 1.8, 0.6),
             "grpo_qa_box_joined_abstain_t06": _row(0.63, 1.9, 0.3)}
    lines = bench_rewards.goals(found, qs)
    assert "- The QA row scst_qa_box_joined was not run: its variants are read alone." in lines
    assert ("- scst_qa_box_joined_abstain_t06 against CIDEr-D SCST: held-out QA-acc 0.660 against 0.600 (+10.0% "
            "relative; goal: at least +10%).") in lines
    assert any(line.startswith("- grpo_qa_box_joined_abstain_t06 against CIDEr-D SCST: held-out QA-acc 0.630")
               for line in lines)
    assert lines[-1] == ("- Template share: CIDEr-D SCST 0.700, scst_qa_box_joined_abstain_t06 0.600, "
                         "grpo_qa_box_joined_abstain_t06 0.300 (goal: the QA-utility and summed rows below CIDEr-D "
                         "SCST's).")
    assert bench_rewards.goals({n: found[n] for n in ("xe_box", "scst_box")}, qs) == [
        "- No QA-utility row was run: no goal is read."]
    main = bench_rewards.at_size(bench_rewards.SETS["main"], 224)  # a summed row alone: its CIDEr-D read, not its gain
    lines = bench_rewards.goals({"scst_box": _row(0.60, 2.0, 0.7), "scst_qa_cider_16_box": _row(0.62, 1.96, 0.5)}, main)
    assert ("- The summed reward scst_qa_cider_16_box keeps 98.0% of CIDEr-D SCST's CIDEr-D (goal: at least 95%) and "
            "a share of the QA gain not read, no QA row run (goal: at least half).") in lines

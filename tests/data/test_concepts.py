"""`rlcap data concepts` on a slice of the real COCO captions: concept extraction, seeded noise, the
split rules, the store and split-file round trip, the template captioner and `rlcap eval --dataset`."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.data.concepts import ConceptsConfig, build_concepts, load_concepts
from rlcap.data.concepts.extract import Concept, extract_concepts
from rlcap.data.concepts.features import FEATURE_DIM, nearest_concepts, region_features
from rlcap.data.concepts.glove import load_glove
from rlcap.data.concepts.noise import Cooccurrence, Noise, perceive, scene_rng
from rlcap.data.concepts.splits import make_splits
from rlcap.data.features import open_feature_store
from rlcap.data.loader import DataConfig, load_data
from rlcap.errors import DataError
from rlcap.reference_captioners import template_caption, template_predictions, word_stats
from tests.tiny import tiny_overrides

N_TEST, N_OTHER = 20, 180


@pytest.fixture(scope="module")
def coco_slice(shared_dir, tmp_path_factory):
    """(captions file, agreement file): 20 images of the 5k human-agreement set and 180 other COCO images."""
    folder = tmp_path_factory.mktemp("coco_slice")
    captions = json.loads((shared_dir / "data" / "coco" / "val2014_captions.json").read_text())
    agreement = json.loads((shared_dir / "data" / "coco" / "human_agreement_5k.json").read_text())[:N_TEST]
    test_ids = {str(a["image_id"]) for a in agreement}
    others = sorted(i for i in captions if i not in test_ids)
    chosen = [*test_ids, *random.Random(0).sample(others, N_OTHER)]
    (folder / "captions.json").write_text(json.dumps({i: captions[i] for i in chosen}))
    (folder / "agreement.json").write_text(json.dumps(agreement))
    return folder / "captions.json", folder / "agreement.json"


@pytest.fixture(scope="module")
def built(coco_slice, tmp_path_factory):
    """A dataset built through the CLI: 20 test, 30 validation, 150 training scenes."""
    captions, agreement = coco_slice
    out = tmp_path_factory.mktemp("concepts")
    assert main(["data", "concepts", "--captions", str(captions), "--out", str(out),
                 "--agreement", str(agreement), "--n-val", "30", "--seed", "3"]) == 0
    return out


def test_content_words_lemmatised_in_order():
    found = list(extract_concepts(["A man riding a red bicycle down the street.",
                                   "Two dogs are sitting on a couch next to a woman.",
                                   "There is a plate of food with broccoli and rice."]))
    assert [(c.word, c.pos) for c in found[0]] == [
        ("man", "noun"), ("ride", "verb"), ("red", "adj"), ("bicycle", "noun"), ("street", "noun")]
    assert [c.word for c in found[1]] == ["dog", "sit", "couch", "woman"]  # "are", "two", "next" are stop words
    assert [c.word for c in found[2]] == ["plate", "food", "broccoli", "rice"]


def test_noise_is_a_function_of_seed_and_image():
    scenes = [[Concept("man", "noun"), Concept("ride", "verb"), Concept("horse", "noun")],
              [Concept("horse", "noun"), Concept("field", "noun"), Concept("grass", "noun")],
              [Concept("man", "noun"), Concept("beach", "noun"), Concept("surfboard", "noun")]]
    cooc = Cooccurrence(scenes)
    noise = Noise(drop=0.3, min_distractors=1, max_distractors=2)
    concepts = [Concept("man", "noun"), Concept("ride", "verb"), Concept("horse", "noun"), Concept("brown", "adj")]
    first = perceive(concepts, cooc, noise, scene_rng(7, "42"))
    assert first == perceive(concepts, cooc, noise, scene_rng(7, "42"))
    assert sorted(first.kept + first.dropped) == sorted(concepts) and first.kept
    assert 1 <= len(first.distractors) <= 2
    assert not {c.word for c in first.distractors} & {c.word for c in concepts}  # never a true concept
    assert sorted(first.regions) == sorted(first.kept + first.distractors)
    draws = {tuple(perceive(concepts, cooc, noise, scene_rng(s, "42")).regions) for s in range(20)}
    assert len(draws) > 1  # another seed, other noise


def test_builds_are_seeded(built, coco_slice, tmp_path):
    captions, agreement = coco_slice
    again = build_concepts(captions, tmp_path / "again", ConceptsConfig(seed=3, n_val=30, agreement=str(agreement)))
    assert load_concepts(again.dataset) == load_concepts(built)
    with open_feature_store(built / "feats.h5") as a, open_feature_store(again.features) as b:
        ids = a.ids()
        assert ids == b.ids()
        assert np.array_equal(a.load_all(ids).att, b.load_all(ids).att)
    other = build_concepts(captions, tmp_path / "other", ConceptsConfig(seed=4, n_val=30, agreement=str(agreement)))
    assert load_concepts(other.dataset) != load_concepts(built)
    assert build_concepts(captions, tmp_path / "again", ConceptsConfig(seed=3, n_val=30, agreement=str(agreement))).skipped


def test_test_split_is_the_agreement_set(built, coco_slice):
    _, agreement_path = coco_slice
    agreement = json.loads(agreement_path.read_text())
    images = json.loads((built / "dataset_concepts.json").read_text())["images"]
    concepts = load_concepts(built)
    test = {im["id"]: [s["raw"] for s in im["sentences"]] for im in images if im["split"] == "test"}
    assert set(test) == {str(a["image_id"]) for a in agreement}
    for a in agreement:
        assert concepts[str(a["image_id"])]["held_out"] == a["candidate"]
        assert test[str(a["image_id"])] == a["references"]
    counts = {split: sum(im["split"] == split for im in images) for split in ("train", "val", "test")}
    assert counts == {"train": N_OTHER - 30, "val": 30, "test": N_TEST}


def test_seeded_split_without_an_agreement_file():
    captions = {str(i): [f"caption {i} {k}" for k in range(5)] for i in range(50)}
    scenes = make_splits(captions, seed=1, n_val=5, n_test=10, max_train_images=20)
    by_split = {s: [x for x in scenes if x.split == s] for s in ("train", "val", "test")}
    assert [len(by_split[s]) for s in ("train", "val", "test")] == [20, 5, 10]
    assert all(x.held_out == captions[x.id][0] and x.references == captions[x.id][1:] for x in scenes)
    assert [x.id for x in make_splits(captions, 1, 5, 10)][:15] == [x.id for x in scenes][:15]
    with pytest.raises(DataError, match="would leave 0 for training, less than half"):
        make_splits(captions, seed=1, n_val=20, n_test=30)


def test_store_and_split_file_round_trip(built):
    data = load_data(DataConfig(dataset=str(built / "dataset_concepts.json"), features=str(built / "feats.h5"),
                                min_count=1))
    concepts = load_concepts(built)
    glove = load_glove()
    test = data.splits["test"]
    assert test.att_dim == test.fc_dim == FEATURE_DIM
    for row, image_id in enumerate(test.ids):
        regions = [Concept(*c) for c in concepts[image_id]["regions"]]
        count = int(test.att_mask[row].sum())
        assert count == len(regions)
        expected = region_features(regions, glove)
        np.testing.assert_allclose(test.att[row, :count].float().numpy(), expected, atol=2e-3)  # float16
        np.testing.assert_allclose(test.fc[row].float().numpy(), expected.mean(axis=0), atol=2e-3)
        assert test.refs[row] and concepts[image_id]["held_out"] not in test.refs[row]


def test_regions_decode_to_their_concepts():
    glove = load_glove()
    regions = [Concept("bicycle", "noun"), Concept("ride", "verb"), Concept("red", "adj")]
    att = region_features(regions, glove).astype(np.float16)
    words, vectors = glove.table(["bike", "bicycle", "riding", "ride", "red", "blue"])
    assert nearest_concepts(att, words, vectors) == regions


def test_template_caption():
    stats = word_stats([["a", "man", "riding", "a", "bicycle", "down", "the", "street"],
                        ["a", "man", "on", "a", "bicycle"], ["a", "red", "bicycle", "in", "the", "street"]])
    concepts = [("street", "noun"), ("ride", "verb"), ("bicycle", "noun"), ("man", "noun"), ("red", "adj")]
    # nouns by mean relative position: man 0.20, bicycle 0.66, street 1.0; "bicycle" follows an -ing verb
    # or "on" (a tie, the first seen wins), "street" follows "down" or "in"
    assert template_caption(concepts, stats) == "a red man riding a bicycle down a street"
    assert template_caption([("man", "noun")], stats) == "a man"


def test_template_captioner_on_a_built_dataset(built):
    data = load_data(DataConfig(dataset=str(built / "dataset_concepts.json"), features=str(built / "feats.h5")),
                     ("train", "test"))
    preds = template_predictions(data.splits["train"], data.splits["test"])
    assert set(preds) == set(data.splits["test"].ids)
    concepts = load_concepts(built)
    for image_id, caption in preds.items():  # every noun of the template is one of the scene's regions
        nouns = {w for w, pos in concepts[image_id]["regions"] if pos == "noun"}
        assert caption.split()[0] in ("a", "an") and nouns & set(caption.split())


def test_eval_on_another_concepts_dataset(built, coco_slice, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(api, "evaluation_metrics", lambda: ["Bleu_4", "CIDEr"])  # METEOR and SPICE are slow to start
    overrides = tiny_overrides(built / "dataset_concepts.json", built / "feats.h5", tmp_path / "run",
                               arch="updown", **{"xe.epochs": 1, "data.seq_per_img": 4})
    api.train(api.load_run_config(None, overrides))
    captions, agreement = coco_slice
    other = build_concepts(captions, tmp_path / "seed9", ConceptsConfig(seed=9, n_val=30, agreement=str(agreement)))
    out = tmp_path / "eval"
    argv = ["eval", str(tmp_path / "run" / "best"), "--dataset", str(other.dataset.parent), "--beam-size", "1",
            "--reference", "template", "--out", str(out)]
    assert main(argv) == 0
    scores = json.loads((out / "scores.json").read_text())
    assert set(scores["model"]) == {"Bleu_4", "CIDEr"} and scores["references"]["template"]["CIDEr"] > 0
    assert len(json.loads((out / "predictions.json").read_text())) == N_TEST
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "best"), "--dataset", str(tmp_path)]) == 2
    assert "no dataset_concepts.json there" in capsys.readouterr().err


def test_bad_noise_options_fail_in_one_line(capsys, tmp_path):
    for option, value in (("--distractors", "3-1"), ("--drop", "1"), ("--n-val", "-1")):
        capsys.readouterr()
        assert main(["data", "concepts", "--captions", "x.json", "--out", str(tmp_path), option, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and option in err, err


def test_the_package_imports_no_model_training_or_reward_code():
    import subprocess
    import sys

    code = ("import sys, rlcap.data.concepts, rlcap.data.concepts.stats; "
            "print(sorted(m for m in sys.modules if m.startswith(('rlcap.models', 'rlcap.train', 'rlcap.rewards'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

import json

import pytest

from rlcap.data.readers import read_coco, read_dataset, read_jsonl, read_karpathy
from rlcap.data.vocab import BOS, EOS, UNK, Vocab
from rlcap.errors import DataError


def test_vocab_build_counts_and_order():
    vocab = Vocab.build([["a", "dog"], ["a", "cat"], ["a", "dog"]], min_count=2)
    assert vocab.itos == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "dog"]
    assert vocab.encode(["a", "cat"]) == [4, UNK]


def test_vocab_decode_cuts_at_eos(tmp_path):
    vocab = Vocab.build([["a", "dog"]], min_count=1)
    assert vocab.decode([BOS, 4, 5, EOS, 4, 4]) == "a dog"
    vocab.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json").itos == vocab.itos


def _karpathy(tmp_path, images):
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": images}))
    return path


def test_karpathy_reader_tokenizes_like_evaluation(tmp_path):
    path = _karpathy(tmp_path, [
        {"cocoid": 42, "filename": "a.jpg", "filepath": "val2014", "split": "restval",
         "sentences": [{"raw": "A Dog, running.", "tokens": ["a", "dog", "running"]}]},
    ])
    (rec,) = read_karpathy(path)
    assert rec.id == "42" and rec.split == "train" and rec.filename == "val2014/a.jpg"
    assert rec.tokens == [["a", "dog", "running"]]


def test_karpathy_reader_rejects_bad_split(tmp_path):
    path = _karpathy(tmp_path, [{"imgid": 1, "split": "dev", "sentences": [{"raw": "x"}]}])
    with pytest.raises(DataError, match="image '1' has split 'dev'"):
        read_karpathy(path)


def test_empty_caption_list_names_the_image(tmp_path):
    path = _karpathy(tmp_path, [{"imgid": 7, "split": "train", "sentences": []}])
    with pytest.raises(DataError, match="image '7' has no captions"):
        read_karpathy(path)


def test_coco_reader_with_split_list(tmp_path):
    ann = tmp_path / "captions.json"
    ann.write_text(json.dumps({"images": [{"id": 1, "file_name": "1.jpg"}, {"id": 2, "file_name": "2.jpg"}],
                               "annotations": [{"image_id": 1, "caption": "a cat"},
                                               {"image_id": 2, "caption": "two dogs"},
                                               {"image_id": 1, "caption": "the cat"}]}))
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": [1], "test": [2]}))
    recs = {r.id: r for r in read_coco(ann, splits)}
    assert recs["1"].captions == ["a cat", "the cat"] and recs["1"].split == "train"
    assert recs["2"].split == "test" and recs["2"].filename == "2.jpg"


def test_jsonl_reader_and_auto_format(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"id": "v1", "split": "val", "captions": ["A man runs."]}\n\n')
    (rec,) = read_dataset(path)
    assert rec.id == "v1" and rec.tokens == [["a", "man", "runs"]]
    path.write_text('{"id": "v1", "captions": []}\n')
    with pytest.raises(DataError, match="data.jsonl:1: missing split"):
        read_jsonl(path)


def test_not_json_and_not_utf8(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(DataError, match="not valid JSON"):
        read_karpathy(bad)
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="not UTF-8"):
        read_karpathy(bad)
    with pytest.raises(DataError, match="missing.json: file not found"):
        read_karpathy(tmp_path / "missing.json")


def test_max_train_images_keeps_the_first_training_images(tmp_path):
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.errors import ConfigError
    from tests.tiny import make_tiny_dataset

    dataset, feats = make_tiny_dataset(tmp_path)
    full = load_data(DataConfig(dataset=str(dataset), features=str(feats), min_count=1))
    cut = load_data(DataConfig(dataset=str(dataset), features=str(feats), min_count=1, max_train_images=5))
    assert cut.splits["train"].ids == full.splits["train"].ids[:5]
    assert cut.splits["test"].ids == full.splits["test"].ids  # the budget is on training images only
    assert len(cut.vocab) < len(full.vocab)  # the vocabulary comes from the kept images
    with pytest.raises(ConfigError, match="max_train_images"):
        DataConfig(dataset=str(dataset), features=str(feats), max_train_images=-1).validate()


def test_train_captions_halves(tmp_path):
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.errors import ConfigError
    from tests.tiny import make_tiny_dataset

    dataset, feats = make_tiny_dataset(tmp_path)  # 3 captions per image
    base = dict(dataset=str(dataset), features=str(feats), min_count=1)
    full, even, odd = (load_data(DataConfig(**base, train_captions=w)) for w in ("all", "even", "odd"))
    for k in range(len(full.splits["train"])):
        refs = full.splits["train"].refs[k]
        assert even.splits["train"].refs[k] == refs[0::2] and odd.splits["train"].refs[k] == refs[1::2]
    assert even.splits["test"].refs == full.splits["test"].refs  # only the training captions are split
    with pytest.raises(ConfigError, match="train_captions"):
        DataConfig(**base, train_captions="half").validate()


def test_msrvtt_reader_and_auto_format(tmp_path):
    from rlcap.data.readers import read_msrvtt

    data = {"info": {}, "videos": [{"video_id": "video0", "split": "train", "category": 9},
                                   {"video_id": "video1", "split": "validate"},
                                   {"video_id": "video2", "split": "test", "filename": "clips/v2.avi"}],
            "sentences": [{"video_id": "video0", "caption": "a man is cooking", "sen_id": 0},
                          {"video_id": "video1", "caption": "A dog runs. Then it jumps.", "sen_id": 1},
                          {"video_id": "video0", "caption": "someone cooks food", "sen_id": 2},
                          {"video_id": "video2", "caption": "cars drive by", "sen_id": 3}]}
    path = tmp_path / "train_val_videodatainfo.json"
    path.write_text(json.dumps(data))
    records = read_dataset(path)  # auto: the "videos" key
    assert [(r.id, r.split, r.filename) for r in records] == [("video0", "train", "video0.mp4"),
                                                              ("video1", "val", "video1.mp4"),
                                                              ("video2", "test", "clips/v2.avi")]
    assert records[0].captions == ["a man is cooking", "someone cooks food"]
    assert records[1].tokens == [["a", "dog", "runs", "then", "it", "jumps"]]  # a two-sentence caption
    data["videos"].append({"video_id": "video3", "split": "train"})
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match="'video3' has no sentences"):
        read_msrvtt(path)
    data["videos"][-1]["split"] = "dev"
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match="split 'dev'"):
        read_msrvtt(path)

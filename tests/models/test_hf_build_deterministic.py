"""`rlcap hf-captioner`: the same data and seed write the same folder, byte for byte, in any process (the
tokenizers library's WordPiece trainer numbered its pieces in a hash map's order, new in each process, so two
identical builds trained differently); and the wordpiece vocabulary rlcap trains instead, by hand and beside the
library's trainer where no tie lets the library's order choose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from rlcap.models.hf.tokenizer_train import caption_tokenizer, wordpiece_vocab  # noqa: E402
from tests.tiny import make_tiny_dataset  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _build(dataset: Path, out: Path, family: str, hash_seed: str) -> dict[str, bytes]:
    """`rlcap hf-captioner` run in a fresh interpreter with ``PYTHONHASHSEED=hash_seed``: the folder's files."""
    argv = [sys.executable, "-m", "rlcap", "hf-captioner", str(out), "--dataset", str(dataset), "--family", family,
            "--size", "tiny", "--seed", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "PYTHONHASHSEED": hash_seed})
    assert done.returncode == 0, done.stderr[-2000:]
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("family", ["git", "smolvlm"])  # a captioner and a vision-language model
def test_the_same_command_writes_the_same_folder_in_two_processes(tmp_path, family):
    """Two builds from the same captions and seed, in processes with different hash seeds, write the same files,
    each byte for byte: the tokenizer, the weights, the configs, the processor and the chat template."""
    dataset, _ = make_tiny_dataset(tmp_path)
    first = _build(dataset, tmp_path / "first", family, "1")
    second = _build(dataset, tmp_path / "second", family, "2")
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(first)
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_wordpiece_vocab_by_hand_whatever_the_order_of_the_words():
    """Specials, every character alone (the sorted alphabet), the later characters as ``##c`` (sorted), then the
    merges, most frequent first: ``a ##b`` and ``a ##c`` tie (2 each) and the first pair by id merges first, in
    whichever order the words come."""
    expected = ["[UNK]", "a", "b", "c", "##b", "##c", "ab", "ac"]
    for counts in ({"ab": 2, "ac": 2}, {"ac": 2, "ab": 2}):
        vocab = wordpiece_vocab(counts, 100, ["[UNK]"])
        assert sorted(vocab, key=vocab.get) == expected
        assert sorted(vocab.values()) == list(range(len(expected)))


def test_wordpiece_tokenizer_equals_the_library_trainer_where_no_tie_is_broken():
    """Captions whose merges never tie (ca 10, cat 7, car 3, at 1): the same vocabulary as the tokenizers
    library's WordPieceTrainer, and the same pieces for words seen and unseen."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    captions = ["Cat cat cat cat", "cat cat cat", "car car car", "at"]
    ours = caption_tokenizer(captions, "wordpiece", 100, ["[PAD]", "[UNK]"], "[UNK]")
    theirs = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    theirs.normalizer, theirs.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.Whitespace()
    theirs.train_from_iterator(captions, trainers.WordPieceTrainer(vocab_size=100, special_tokens=["[PAD]", "[UNK]"],
                                                                   show_progress=False))
    assert set(ours.get_vocab()) == set(theirs.get_vocab())
    assert {"ca", "cat", "car", "at", "##a", "t"} <= set(ours.get_vocab())
    for text in ["a cat at the car", "Tact, tar.", "rat"]:
        assert ours.encode(text).tokens == theirs.encode(text).tokens, text
    assert ours.encode("tat").tokens == ["t", "##a", "##t"] and ours.encode("tac").tokens == ["[UNK]"]  # (no ##c)

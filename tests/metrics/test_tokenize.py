from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from rlcap.metrics import tokenize
from rlcap.metrics.java import pycocoevalcap_dir


@pytest.mark.parametrize(
    ("caption", "tokens"),
    [
        ("A man's T-shirt, (red).", ["a", "man", "'s", "t-shirt", "-lrb-", "red", "-rrb-"]),
        ("He can't go; it doesn't.", ["he", "ca", "n't", "go", "it", "does", "n't"]),
        ("You cannot see it", ["you", "can", "not", "see", "it"]),
        ('A sign reads "STOP".', ["a", "sign", "reads", "stop"]),
        ("On St. Mary's street, 1,000 dogs at 10:30.", ["on", "st.", "mary", "'s", "street", "1,000", "dogs", "at", "10:30"]),
        ("The U.S. flag and a dog.cat", ["the", "u.s.", "flag", "and", "a", "dog.cat"]),
        ("fire hydrant I. The street", ["fire", "hydrant", "i", "the", "street"]),
        ("bottles of S. Pellegrino water", ["bottles", "of", "s.", "pellegrino", "water"]),
        ("two no. 2 candles", ["two", "no.", "2", "candles"]),
        ("a trash can.;", ["a", "trash", "can."]),
        ("West 25 1/2 street", ["west", "25", "1/2", "street"]),
        ("", []),
        ("... , ; -- !", []),
        ("!?", ["!?"]),  # PTBLexer keeps "!?" whole and it is not in pycocoevalcap's list
    ],
)
def test_tokenize_hand_cases(caption, tokens):
    assert tokenize(caption) == tokens


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="java not on PATH")
def test_agreement_with_java_ptbtokenizer(shared_dir, tmp_path):
    """At least 99.9% of the 25,000 captions tokenized exactly as pycocoevalcap's PTBTokenizer.

    Lines are fed as pycocoevalcap does (one caption a line, newlines replaced by spaces) and
    compared as its BLEU/CIDEr/METEOR read them (split on whitespace), after its punctuation removal.
    """
    from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS

    items = json.loads((shared_dir / "data" / "coco" / "human_agreement_5k.json").read_text())
    captions = [c for x in items for c in [x["candidate"], *x["references"]]]
    source = tmp_path / "captions.txt"
    source.write_text("\n".join(c.replace("\n", " ") for c in captions), encoding="utf-8")
    jar = pycocoevalcap_dir() / "tokenizer" / "stanford-corenlp-3.4.1.jar"
    cmd = ["java", "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines", "-lowerCase", str(source)]
    lines = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8").split("\n")
    java = [[w for w in line.rstrip().split(" ") if w not in PUNCTUATIONS] for line in lines[: len(captions)]]
    same = sum(" ".join(j).split() == tokenize(c) for j, c in zip(java, captions))
    assert len(captions) == 25_000
    assert same / len(captions) >= 0.999, same

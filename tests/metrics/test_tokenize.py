from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS

from rlcap.metrics.java import pycocoevalcap_dir
from rlcap.metrics.tokenize import tokenize, tokenize_lines


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


DATA = Path(__file__).parent / "data"


def _java_tokens(java_output: str, n: int) -> list[list[str]]:
    """pycocoevalcap's reading of the jar's output: one line a caption, split on spaces, punctuation removed."""
    lines = java_output.split("\n")[:n]
    return [" ".join(w for w in line.rstrip().split(" ") if w not in PUNCTUATIONS).split() for line in lines]


@pytest.mark.parametrize("name", ["ptb_coco_cases", "ptb_nonascii"])
def test_fixtures_equal_stored_java_output(name):
    """Stored output of the CoreNLP 3.4.1 jar (run once) on COCO captions that exercise abbreviations,
    single letters, quotes, numbers and neighbours ("Branch St. 200 N." then "Street corner ..."), and on
    non-ASCII text (accents, curly quotes, dashes, emoji, CJK, Greek, Cyrillic, Devanagari)."""
    captions = (DATA / f"{name}.txt").read_text(encoding="utf-8").split("\n")
    java = _java_tokens((DATA / f"{name}.java.txt").read_text(encoding="utf-8"), len(captions))
    ours = tokenize_lines(captions)
    differ = [(c, j, o) for c, j, o in zip(captions, java, ours) if j != o]
    assert not differ, differ[:5]


def test_caption_at_end_of_file_keeps_the_period_of_a_single_letter():
    assert tokenize_lines(["sign that says Branch St. 200 N.", "A dog"]) == [
        ["sign", "that", "says", "branch", "st.", "200", "n"], ["a", "dog"]]
    assert tokenize_lines(["sign that says Branch St. 200 N.", "Street corner"])[0][-1] == "n."
    assert tokenize("Branch St. 200 N.", next_line=None)[-1] == "n."
    assert tokenize("A pizza\U0001F355 with cr\u00e8me br\u00fbl\u00e9e \u2014 \u201cyum\u201d") == [
        "a", "pizza", "with", "cr\u00e8me", "br\u00fbl\u00e9e", "yum"]


def _run_ptb_jar(captions: list[str], tmp_path: Path) -> list[list[str]]:
    source = tmp_path / "captions.txt"
    source.write_text("\n".join(c.replace("\n", " ") for c in captions), encoding="utf-8")
    jar = pycocoevalcap_dir() / "tokenizer" / "stanford-corenlp-3.4.1.jar"
    cmd = ["java", "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines", "-lowerCase", str(source)]
    return _java_tokens(subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8"), len(captions))


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="java not on PATH")
def test_agreement_with_java_ptbtokenizer(shared_dir, tmp_path):
    """The 25,000 captions of the 5k set tokenized exactly as pycocoevalcap's PTBTokenizer.

    Lines are fed as pycocoevalcap does (one caption a line, newlines replaced by spaces) and
    compared as its BLEU/CIDEr/METEOR read them (split on whitespace), after its punctuation removal.
    """
    items = json.loads((shared_dir / "data" / "coco" / "human_agreement_5k.json").read_text())
    captions = [c for x in items for c in [x["candidate"], *x["references"]]]
    java = _run_ptb_jar(captions, tmp_path)
    assert len(captions) == 25_000
    assert java == tokenize_lines(captions)


@pytest.mark.java
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="java not on PATH")
def test_agreement_on_all_coco_val2014_captions(shared_dir, tmp_path):
    """All 202,654 captions of COCO val2014 (about 40 s)."""
    by_image = json.loads((shared_dir / "data" / "coco" / "val2014_captions.json").read_text())
    captions = [c for caps in by_image.values() for c in caps]
    java = _run_ptb_jar(captions, tmp_path)
    assert len(captions) == 202_654
    differ = [(c, j) for c, j, o in zip(captions, java, tokenize_lines(captions)) if j != o]
    assert not differ, differ[:5]

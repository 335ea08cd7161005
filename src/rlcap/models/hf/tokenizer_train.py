"""A fast tokenizer trained on captions, the same file for the same captions in every process: what
``rlcap hf-captioner`` builds its captioners' (rlcap.models.hf.build_captioner) and vision-language models'
(rlcap.models.hf.build_tokenizer) tokenizers with, lower-cased, split on whitespace and punctuation.

``word``: whole words, most frequent first, ties by the word (the tokenizers library's WordLevelTrainer sorts so).
``wordpiece``: BERT's subwords. The library's WordPieceTrainer (tokenizers 0.23) numbers its ``##`` pieces in the
order it walks a hash map, seeded anew in each process, and breaks ties between merges of equal counts by those
numbers: two builds from the same captions wrote different vocabularies, which trained differently. Here its BPE
trainer runs with no continuing prefix on words whose later characters are written as private-use characters (one
per character, in the order of the characters), so every starting piece is in the sorted alphabet and every tie
is broken the same way; the pieces are then read back, the later characters' with the ``##`` prefix.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from rlcap.errors import ConfigError

PREFIX = "##"  # a word's later pieces (BERT's WordPiece)
PRIVATE = 0xF0000  # Supplementary Private Use Area-A: no caption's character, 65,534 code points
KINDS = ("word", "wordpiece")


def caption_tokenizer(texts: Iterable[str], kind: str, vocab_size: int, specials: list[str], unk: str) -> Any:
    """A ``tokenizers.Tokenizer`` trained on ``texts``: ``specials`` at ids 0.. in order, ``unk`` its unknown
    token, at most ``vocab_size`` entries (``wordpiece``), the same vocabulary in every process."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind not in KINDS:
        raise ConfigError(f"tokenizer: {kind!r} is not one of {', '.join(KINDS)}")
    tok = Tokenizer(models.WordLevel(unk_token=unk) if kind == "word" else models.WordPiece(unk_token=unk))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix=PREFIX)  # joins a word's pieces, words with spaces
    if kind == "word":
        tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=specials, show_progress=False))
        return tok
    vocab = wordpiece_vocab(_word_counts(tok, texts), vocab_size, specials)
    tok.model = models.WordPiece(vocab, unk_token=unk, continuing_subword_prefix=PREFIX)
    tok.add_special_tokens(specials)  # (as the trainer leaves them: special, matched before the model)
    return tok


def _word_counts(tok: Any, texts: Iterable[str]) -> Counter[str]:
    """How often each word occurs in ``texts``, as ``tok`` normalises and splits them. Lower-casing maps each
    character alone and no word spans a space, so each distinct space-separated chunk is split once, and captions
    repeat their words: one tokenizers call per caption cost more than the training (50k captions)."""
    chunks = Counter(chunk for text in texts for chunk in text.split(" ") if chunk)
    counts: Counter[str] = Counter()
    for chunk, n in chunks.items():
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(chunk)):
            counts[word] += n
    return counts


def wordpiece_vocab(counts: dict[str, int], vocab_size: int, specials: list[str]) -> dict[str, int]:
    """WordPiece's vocabulary of words occurring ``counts`` times: ``specials``, every character, the words'
    later characters as ``##c``, then the merges of the most frequent adjacent pieces (BPE, as WordPieceTrainer
    trains), until ``vocab_size`` entries or whole words; ties broken by the pieces' ids, which no hash order
    sets."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    later = sorted({c for w in counts for c in w[1:]})
    if len(later) > 0xFFFFE - PRIVATE or any(ord(c) >= PRIVATE for w in counts for c in w):
        raise ConfigError("the captions hold characters of the Supplementary Private Use Areas (U+F0000 and "
                          "above) or too many distinct characters: expected text a wordpiece tokenizer can learn")
    marked = {c: chr(PRIVATE + i) for i, c in enumerate(later)}
    unmarked = {m: c for c, m in marked.items()}
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # (the words are split already)
    # (every character alone too, as the trainer's alphabet holds it: a word starting with it is not unknown)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=later,
                                  show_progress=False)
    bpe.train_from_iterator((" ".join([w[0] + "".join(marked[c] for c in w[1:])] * n) for w, n in counts.items()),
                            trainer)
    vocab: dict[str, int] = {}
    for piece, _ in sorted(bpe.get_vocab().items(), key=lambda item: item[1]):
        text = "".join(unmarked.get(c, c) for c in piece)
        # (two pieces read back as one string, "##" a word of its own: the first keeps it, as the trainer does)
        vocab.setdefault(PREFIX + text if piece[0] in unmarked else text, len(vocab))
    return vocab

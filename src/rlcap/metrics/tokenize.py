"""pycocoevalcap's caption tokenization, in Python (no Java).

pycocoevalcap runs Stanford CoreNLP 3.4.1's ``PTBTokenizer -preserveLines -lowerCase`` on every
caption and then drops the tokens in its ``PUNCTUATIONS`` list. This module reproduces that on
the captions seen in practice (agreement measured on COCO, see docs/METRICS.md) with a small
longest-match lexer in the manner of the JFlex lexer it imitates: at each position every token
pattern is tried and the longest match wins (the earlier pattern on ties).

Known gaps (rare in captions): emoticons, URLs, e-mail addresses and SGML tags are not
recognised as single tokens. PTBLexer joins "25 1/2" into one token with a no-break space;
pycocoevalcap's BLEU, METEOR and CIDEr split it again (``str.split()``), so it is two tokens
here (its ROUGE-L, which splits on " " only, sees one).
"""

from __future__ import annotations

import functools
import re

# pycocoevalcap/tokenizer/ptbtokenizer.py: tokens removed after PTB tokenization. The bracket
# names are upper case there, while -lowerCase emits "-lrb-", so brackets are never removed.
PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
     ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)  # fmt: skip

# Abbreviations that keep their period (CoreNLP 3.4.1 PTBLexer's ABBREV1/ABBREV2 lists).
# Matched without case, except the state names that PTBLexer spells with a capital ([W]ash).
_ABBREVIATIONS = (
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|mon|tue|tues|wed|thu|thurs|fri|"
    "ala|ariz|calif|colo|conn|ct|dak|fla|ga|ind|kans?|ky|md|mich|minn|mo|mont|neb|nev|okla|"
    "penn|tenn|tex|va|vt|wisc?|wyo|"
    "inc|cos?|corp|pp?t[ye]s?|ltd|plc|rt|bancorp|dept|bhd|assn|univ|intl|sys|tel|est|ext|sq|"
    "jr|sr|bros|blvd|rd|esq|etc|al|seq|bldg|mr|mrs|ms|drs?|profs?|sens?|reps?|attys?|lt|col|"
    "gen|messrs|govs?|adm|rev|maj|sgt|cpl|pvt|capt|ste?|ave|pres|lieut|hon|brig|co?mdr|pfc|spc|"
    "supts?|det|mt|ft|mme|mmes|mlle|mlles|invt|elec|natl|m[ft]g|ph|vs"
)
_CAPITAL_ABBREVIATIONS = r"(?:Az|Ark|Del|Ill|La|Mass|Miss|Ore|Pa|Wash)\."
_NUMBER_ABBREVIATIONS = re.compile(r"(?:ca|figs?|prop|nos?|art|bldg|pp|op)\.", re.IGNORECASE)
# Words with an apostrophe that PTBLexer keeps whole (its APOWORD rule).
_APOSTROPHE_WORDS = (
    r"[a-hj-xz]'[a-z]{2,}|[a-z]+[aeiouy]'[aeiou][a-z]*|dunkin'|somethin'|ol'|'em|'n'|'till?|"
    r"'cause|cont'd|nor'easter|c'mon|e'er|s'mores|ev'ry|li'l|nat'l|'[2-9]0s"
)
_SPLIT_WORDS = {  # PTBLexer splits these colloquial forms in two
    "cannot": ("can", "not"), "gonna": ("gon", "na"), "gotta": ("got", "ta"),
    "wanna": ("wan", "na"), "lemme": ("lem", "me"), "gimme": ("gim", "me"),
    "'tis": ("'t", "is"), "'twas": ("'t", "was"),
}  # fmt: skip
_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}

# Ordered token patterns; the longest match wins, the earlier one on ties.
_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"(?:" + _ABBREVIATIONS + r")\.",  # st. mr. etc.
        _NUMBER_ABBREVIATIONS.pattern,  # no. art. (kept only before a number)
        r"[a-z](?:\.[a-z])*\.",  # letters and acronyms: b. u.s. e.g.
        r"[a-z][a-z0-9]*(?:\.[a-z0-9]+)+",  # dotted words: dog.cat a.b.c
        r"[-+]?\d+(?:[.,:/]\d+)*",  # numbers and times: 1,000 3.5 10:30 1/2
        r"[a-z0-9]+(?:[-_/][a-z0-9]+)*",  # words; hyphens and slashes kept inside
        _APOSTROPHE_WORDS,
        r"@[a-z0-9_]+",  # @user
        r"'(?:s|re|ll|ve|m|d)(?![a-z])",  # clitics
        r"n't(?![a-z])",
        r"\.{3,}|\.|[?!]+|-{2,}|-|,|;|:|&|\$|#|%|\+|=|\*|\^|~|<|>|\|",
        r"``|''|`|'",
    )
) + (re.compile(_CAPITAL_ABBREVIATIONS), re.compile(r"[A-Z]+&[A-Z]+"))  # Wash. AT&T
_NEGATION = re.compile(r"n't(?![a-z])", re.IGNORECASE)
_SINGLE_LETTER = re.compile(r"[a-z]\.", re.IGNORECASE)
# After a single letter and its period, PTBLexer ends the sentence ("I. The" -> "i ." but
# "S. Pellegrino" -> "s.") only before these words; probed on CoreNLP 3.4.1 with every
# capitalised word of COCO val2014 (17,145 words).
_SENTENCE_STARTERS = frozenset(
    "A About According After An As At But Earlier He Her Here However If In It Last Many More "
    "Now Once One Other Our She Since So Some Such That The Their Then There These They This We "
    "What When While Yet You".split()
)
_LEADING_WORD = re.compile(r"[A-Za-z]*")


def tokenize(caption: str) -> list[str]:
    """Tokenize a raw caption as pycocoevalcap does: PTB tokens, lower case, punctuation removed.

    >>> tokenize("A man's T-shirt, (red).")
    ['a', 'man', "'s", 't-shirt', '-lrb-', 'red', '-rrb-']
    """
    chunks = caption.split()
    tokens: list[str] = []
    for i, chunk in enumerate(chunks):
        # PTBLexer looks past the space: "no. 5" keeps "no.", "b. The" splits "b .". pycocoevalcap
        # tokenizes one caption a line and the next line nearly always starts with "A", so the
        # end of a caption counts as followed by "A".
        follower = chunks[i + 1] if i + 1 < len(chunks) else "A"
        starter = _LEADING_WORD.match(follower).group() in _SENTENCE_STARTERS  # type: ignore[union-attr]
        tokens.extend(_tokenize_chunk(chunk, follower[:1].isdigit(), starter))
    return tokens


@functools.lru_cache(maxsize=1 << 16)
def _tokenize_chunk(chunk: str, digit_follows: bool, starter_follows: bool) -> tuple[str, ...]:
    """Tokens of one whitespace-free chunk, punctuation removed (cached: chunks repeat a lot)."""
    if chunk.isalnum() and chunk.isascii():
        return _SPLIT_WORDS.get(chunk.lower(), (chunk.lower(),))
    out: list[str] = []
    pos = 0
    while pos < len(chunk):
        token, pos = _next_token(chunk, pos, digit_follows, starter_follows)
        out.extend(_SPLIT_WORDS.get(token.lower(), (token.lower(),)))
    return tuple(t for t in out if t not in PUNCTUATIONS)


def _next_token(chunk: str, pos: int, digit_follows: bool, starter_follows: bool) -> tuple[str, int]:
    """The token starting at ``pos`` (normalised, original case) and the position after it."""
    char = chunk[pos]
    if char == '"':
        # Latex quotes: an opening quote when a word follows, else a closing one.
        follows = chunk[pos + 1 : pos + 2]
        return ("``" if follows.isalnum() or follows == "$" else "''"), pos + 1
    if char in _BRACKETS:
        return _BRACKETS[char], pos + 1
    best = ""
    for pattern in _PATTERNS:
        match = pattern.match(chunk, pos)
        if match and len(match.group()) > len(best):
            best = match.group()
    if not best:
        return char, pos + 1  # any other symbol is a token of its own
    at_end = pos + len(best) == len(chunk)
    if _NUMBER_ABBREVIATIONS.fullmatch(best):
        keep = at_end and digit_follows  # "no. 5" keeps the period, "no." alone does not
        return (best, pos + len(best)) if keep else (best[:-1], pos + len(best) - 1)
    return _refine(chunk, pos, best, at_end and starter_follows)


def _refine(chunk: str, pos: int, token: str, starter_follows: bool) -> tuple[str, int]:
    """Contextual fixes of a longest match: negations, trailing periods, single quotes."""
    end = pos + len(token)
    rest = chunk[end:]
    if token[-1:] in "nN" and len(token) > 1 and _NEGATION.match(chunk, end - 1):
        return token[:-1], end - 1  # do|n't, ca|n't
    if token.isalnum() and rest[:1] == "." and rest[1:2] in (",", ";", ":"):
        return token + ".", end + 1  # "truck.," keeps its period
    if _SINGLE_LETTER.fullmatch(token) and starter_follows:
        return token[:-1], end - 1  # "I. The": a sentence ends after the letter
    if token == "'":
        return ("`" if rest[:1].isalpha() else "'"), end
    return token, end

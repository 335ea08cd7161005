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
import unicodedata
from collections.abc import Sequence

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
    r"[a-hj-xz]['\u2019][^\W\d_]{2,}|[a-z]+[aeiouy]'[aeiou][a-z]*|dunkin'|somethin'|ol'|'em|'n'|'till?|"
    r"'cause|cont'd|nor'easter|c'mon|e'er|s'mores|ev'ry|li'l|nat'l|['\u2019][2-9]0s"
)
_SPLIT_WORDS = {  # PTBLexer splits these colloquial forms in two
    "cannot": ("can", "not"), "gonna": ("gon", "na"), "gotta": ("got", "ta"),
    "wanna": ("wan", "na"), "lemme": ("lem", "me"), "gimme": ("gim", "me"),
    "'tis": ("'t", "is"), "'twas": ("'t", "was"),
}  # fmt: skip
# Characters PTBLexer rewrites (curly quotes to LaTeX quotes, dashes, currencies, fractions, the
# ellipsis), each a token of its own; checked on the Java tokenizer (tests/metrics/data/nonascii.txt).
_CHAR_TOKENS = {
    "\u201c": "``", "\u00ab": "``", "\u201d": "''", "\u00bb": "''", "\u2018": "`",
    "\u2014": "--", "\u2013": "--", "\u20ac": "$", "\u00a3": "#", "\u2026": "...",
    "\u00bd": "1/2", "\u00bc": "1/4", "\u00be": "3/4",
}  # fmt: skip
_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}



def _char_classes() -> tuple[str, str]:
    """Regex classes of the Basic Multilingual Plane's letters with combining marks (categories L, M),
    and of those plus decimal digits (Nd); one pass over the plane at import (about 0.1 s)."""
    ranges: tuple[list[str], list[str]] = ([], [])
    starts: list[int | None] = [None, None]
    for code in range(0x10001):
        category = unicodedata.category(chr(code)) if code < 0x10000 else ""
        inside = (category[:1] in ("L", "M"), category[:1] in ("L", "M") or category == "Nd")
        for k in (0, 1):
            start = starts[k]
            if inside[k] and start is None:
                starts[k] = code
            elif not inside[k] and start is not None:
                end = "" if code - 1 == start else "-" + re.escape(chr(code - 1))
                ranges[k].append(re.escape(chr(start)) + end)
                starts[k] = None
    return "[" + "".join(ranges[0]) + "]", "[" + "".join(ranges[1]) + "]"


# Letters (with their combining marks) and letters-or-digits of any script: PTBLexer is a Unicode
# lexer ("étouffée", "東京", "москва", "हिन्दी" are words) but "2½" is "2 1/2" (other numbers are not digits).
_L, _W = _char_classes()
_APOS = "['\u2019]"  # the right single quote doubles as an apostrophe: "dog\u2019s", "doesn\u2019t"

# Ordered token patterns; the longest match wins, the earlier one on ties.
_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"(?:" + _ABBREVIATIONS + r")\.",  # st. mr. etc.
        _NUMBER_ABBREVIATIONS.pattern,  # no. art. (kept only before a number)
        rf"{_L}(?:\.{_L})*\.",  # letters and acronyms: b. u.s. e.g.
        rf"{_L}{_W}*(?:\.{_W}+)+",  # dotted words: dog.cat a.b.c
        r"[-+]?\d+(?:[.,:/]\d+)*",  # numbers and times: 1,000 3.5 10:30 1/2
        rf"{_W}+(?:[-_/]{_W}+)*",  # words; hyphens and slashes kept inside
        _APOSTROPHE_WORDS,
        r"@[a-z0-9_]+",  # @user
        _APOS + rf"(?:s|re|ll|ve|m|d)(?!{_L})",  # clitics
        rf"n{_APOS}t(?!{_L})",
        r"\.{3,}|\.|[?!]+|-{2,}|-|,|;|:|&|\$|#|%|\+|=|\*|\^|~|<|>|\|",
        r"``|''|`|'",
    )
) + (re.compile(_CAPITAL_ABBREVIATIONS), re.compile(r"[A-Z]+&[A-Z]+"))  # Wash. AT&T
_CLITIC = re.compile(r"'(?:s|re|ll|ve|m|d)|n't", re.IGNORECASE)
_NEGATION = re.compile(rf"n{_APOS}t(?!{_L})", re.IGNORECASE)
_SINGLE_LETTER = re.compile(rf"{_L}\.", re.IGNORECASE)
# After a single letter and its period, PTBLexer ends the sentence ("I. The" -> "i ." but
# "S. Pellegrino" -> "s.") only before these words; probed on CoreNLP 3.4.1 with every
# capitalised word of COCO val2014 (17,145 words).
_SENTENCE_STARTERS = frozenset(
    "A About According After An As At But Earlier He Her Here However If In It Last Many More "
    "Now Once One Other Our She Since So Some Such That The Their Then There These They This We "
    "What When While Yet You".split()
)
_LEADING_WORD = re.compile(r"[A-Za-z]*")


def tokenize(caption: str, next_line: str | None = "A") -> list[str]:
    """Tokenize a raw caption as pycocoevalcap does: PTB tokens, lower case, punctuation removed.

    pycocoevalcap tokenizes one caption a line of a file, and PTBLexer looks past the end of the
    line: a caption ending in a single letter and a period ("... 200 N.") keeps "n." unless the next
    line starts a sentence ("A ...", "The ..."). ``next_line`` is that following caption (None: end
    of the file); its default "A" is what most COCO captions start with. Use
    :func:`tokenize_lines` to tokenize a whole pycocoevalcap file exactly.

    >>> tokenize("A man's T-shirt, (red).")
    ['a', 'man', "'s", 't-shirt', '-lrb-', 'red', '-rrb-']
    """
    # PTBLexer reads UTF-16 and drops characters outside the Basic Multilingual Plane (emoji) as
    # untokenizable.
    text = caption if caption.isascii() else "".join(c for c in caption if ord(c) < 0x10000)
    chunks = text.split()
    last_follower = (next_line.split() or [""])[0] if next_line is not None else ""
    tokens: list[str] = []
    for i, chunk in enumerate(chunks):
        # PTBLexer looks past the space: "no. 5" keeps "no.", "b. The" splits "b .".
        follower = chunks[i + 1] if i + 1 < len(chunks) else last_follower
        starter = _LEADING_WORD.match(follower).group() in _SENTENCE_STARTERS  # type: ignore[union-attr]
        tokens.extend(_tokenize_chunk(chunk, follower[:1].isdigit(), starter))
    return tokens


def tokenize_lines(captions: Sequence[str]) -> list[list[str]]:
    """Tokenize captions exactly as pycocoevalcap's one run over them, one caption a line, in order.

    Each caption sees the first word of the next non-empty caption (see :func:`tokenize`); the last
    one sees the end of the file.
    """
    lines = [c.replace("\n", " ") for c in captions]
    followers: list[str | None] = [None] * len(lines)
    upcoming: str | None = None
    for i in range(len(lines) - 1, -1, -1):
        followers[i] = upcoming
        if lines[i].split():
            upcoming = lines[i]
    return [tokenize(line, follower) for line, follower in zip(lines, followers)]


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
    if char in _CHAR_TOKENS:
        return _CHAR_TOKENS[char], pos + 1
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
        return ("'" if char == "\u2019" else char), pos + 1  # any other symbol is a token of its own
    if best[0] == "\u2019" or best[1:2] == "\u2019":
        best_ascii = best.replace("\u2019", "'")
        if _CLITIC.fullmatch(best_ascii):  # "\u2019s", "n\u2019t" -> "'s", "n't"; "l\u2019eglise" stays
            return best_ascii, pos + len(best)
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

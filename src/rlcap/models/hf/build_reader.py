"""A text-only QA reader built and trained here, offline: a small OLMo-2 causal LM with a word-level tokenizer
trained on the captions and questions and a chat template with Qwen's turn markers, trained with plain torch to
answer a multiple-choice question about a picture from one of its reference captions (the next token after the
assistant's turn opens: the right option's letter). What ``rlcap data reader`` writes and the ``qa_utility``
reward and QA-acc read on shapes, where no pretrained reader can be downloaded; with a real captioner the reader
is a downloaded instruct model ([Xing26] use Qwen2.5-3B-Instruct; docs/RL.md).

Each training example draws an image of the training split, one of its reference captions, one of its questions
and an order of the options (uniform: the reader learns no letter). The answer is the right letter then the right
option's text ("B red", as an instruct model answers); the loss is the cross-entropy of the letter after the prompt
(over the whole vocabulary: the probability the reward reads) plus that of the option's words after the letter. Early
on most examples are a lookup drill, whose caption is the right option's text alone (:func:`lookup_share`).
A share of the other examples (``joined``) reads two or three of the picture's references joined into one caption
(:func:`join_references`): a reader trained on single references alone reads less from all five joined than from
one, and from a picture's complete description reads no more than from one reference, so it cannot pay a caption
for stating more than one reference does, the dense caption [Xing26]'s reader (an instruct LM) pays for
(docs/RL.md, "QA utility").
With ``abstain`` every prompt offers [Xing26]'s "Can not answer based on the caption" last, and a share of the
non-drill examples read a caption that does not state the answer (``negative``; on shapes a reference of the scene
without the asked shapes), answered with that option: a reader for ``reward.qa_abstain``, which pays a caption
nothing on a question it leaves unanswered (docs/RL.md, "A reader that abstains").
Without the option's words after the letter a reader stayed at chance, even on the drill alone: the words after
the letter teach it to bind each letter to the option after it, which the letter itself needs
(docs/notes/2026-12-02-qa-readers.md).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcap.data.qa import ABSTAIN, LETTERS, QASet, Question
from rlcap.errors import ConfigError
from rlcap.models.hf.qa_reader import INSTRUCTION, QAReader
from rlcap.transformers_io import no_bars

logger = logging.getLogger(__name__)

SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
# Qwen's turn markers, no system turn: the user's text, then the assistant's turn opened
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROMPT_WORDS = f"user assistant Caption Question {INSTRUCTION} " + " ".join(LETTERS)
PUNCTUATION = r"[.,:;?!]"  # dropped by the tokenizer's normalizer: "A. red" is the two tokens A red


@dataclass(frozen=True)
class ReaderSize:
    hidden: int
    layers: int
    heads: int


LOG_EVERY = 250
WARMUP = 100  # steps of linear learning-rate warm-up
# the lookup drill's share: all the examples for the first 40% of the steps, then down to a quarter by 60%
LOOKUP_ONLY, LOOKUP_UNTIL, LOOKUP_END = 0.4, 0.6, 0.25

SIZES = {"small": ReaderSize(128, 3, 4), "base": ReaderSize(128, 4, 4)}
JOIN_MOST = 3  # the most references one joined training caption holds (join_references)
# (rng, image id, question) -> a caption of that image that does not state the question's answer
Negative = Callable[[random.Random, str, Question], str]
JOINED = 0.5  # the default share of joined references among the non-drill examples (docs/RL.md, "QA utility")
STEPS = 5000  # the default optimizer steps
# with the abstain option taught the letter leaves chance later (about 2,500 steps against 1,750 on shapes) and at
# STEPS it read the count of a picture of three or four shapes from its complete description at 0.50 (the reader
# without the option: 1.00), at 10,000 at 1.00 (docs/RL.md, "A reader that abstains")
ABSTAIN_STEPS = 10000


def default_steps(abstain: float) -> int:
    """A reader's optimizer steps when none are given: ``ABSTAIN_STEPS`` when it learns to abstain, else ``STEPS``."""
    return ABSTAIN_STEPS if abstain else STEPS


def reader_tokenizer(texts: Sequence[str]):
    """A word-level fast tokenizer of ``texts`` and the prompt's words, Qwen's turn markers special, punctuation
    dropped (an option's word stands right after its letter, the prompt is shorter). Cased, unlike
    the captioners' (:func:`rlcap.models.hf.tokenizer_train.caption_tokenizer`): lower-cased, the option letter A
    would be the article a, the commonest word of the captions, which the reader must tell from the letter."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from tokenizers import Regex, normalizers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(Regex(PUNCTUATION), "")
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([*texts, PROMPT_WORDS], trainers.WordLevelTrainer(special_tokens=SPECIALS,
                                                                              show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_reader_model(vocab_size: int, size: str, seed: int):
    """An OLMo-2 causal LM of ``size`` with random weights seeded by ``seed``: a plain pre-norm decoder whose
    model type AutoTokenizer maps to the tokenizer file as saved (a Qwen2 or Llama config makes it rebuild its
    family's byte-level tokenizer over the word-level vocabulary)."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    if size not in SIZES:
        raise ConfigError(f"--size: {size!r} is not one of {', '.join(SIZES)}")
    s = SIZES[size]
    torch.manual_seed(seed)
    config = Olmo2Config(vocab_size=vocab_size, hidden_size=s.hidden, intermediate_size=2 * s.hidden,
                         num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.heads,
                         max_position_embeddings=512, tie_word_embeddings=True, pad_token_id=0,
                         eos_token_id=3, bos_token_id=None)
    return Olmo2ForCausalLM(config)


def lookup_share(step: int, steps: int) -> float:
    """The share of training examples at ``step`` whose caption is the right option's text alone (the lookup
    drill): 1 for the first ``LOOKUP_ONLY`` of the steps, then linearly down to ``LOOKUP_END`` at ``LOOKUP_UNTIL``.
    The letter's loss leaves ln 4 on the drill first (after about 900 steps of 16 here); with the drill's share
    falling from the start it had not by 1,250 steps of 32."""
    done = (step / steps - LOOKUP_ONLY) / (LOOKUP_UNTIL - LOOKUP_ONLY)
    return 1.0 + (LOOKUP_END - 1.0) * min(1.0, max(0.0, done))


def join(captions: Sequence[str]) -> str:
    """``captions`` as one caption: each ended by a full stop, joined by a space."""
    return " ".join(c.rstrip(".") + "." for c in captions)


def join_references(rng: random.Random, references: Sequence[str]) -> str:
    """Two to ``JOIN_MOST`` distinct references of one picture, drawn and joined (:func:`join`): one caption that
    states what each of them states."""
    k = rng.randint(2, min(JOIN_MOST, len(references)))
    return join(rng.sample(list(references), k))


def _example(rng: random.Random, captions: dict[str, list[str]], qa: QASet, ids: list[str], reader: QAReader,
             lookup: float, joined: float = 0.0, abstain: float = 0.0, negative: Negative | None = None
             ) -> tuple[str, int, str]:
    """(prompt, the right letter's index, the right option's text) of a drawn image, question and option order;
    with probability ``lookup`` the caption is the right option's text alone (the drill), else with probability
    ``joined`` the picture's references joined (:func:`join_references`, when it has two), else one reference.
    With ``abstain`` > 0 every prompt offers :data:`ABSTAIN` last, as the reward does with ``reward.qa_abstain``,
    and with probability ``abstain`` a non-drill example's caption is ``negative``'s, one that does not state the
    answer, whose right option is :data:`ABSTAIN`. With ``joined`` and ``abstain`` 0 the draws are those of a
    reader trained before the options existed."""
    image_id = rng.choice(ids)
    q = rng.choice(qa.of(image_id))
    order = rng.sample(range(len(q.options)), len(q.options))
    options = [q.options[j] for j in order] + ([ABSTAIN] if abstain else [])
    references = captions[image_id]
    if rng.random() < lookup:
        caption = q.options[q.answer]
    elif abstain and negative is not None and rng.random() < abstain:
        return reader.render(negative(rng, image_id, q), q.question, options), len(options) - 1, ABSTAIN
    elif joined and rng.random() < joined and len(references) > 1:
        caption = join_references(rng, references)
    else:
        caption = rng.choice(references)
    return reader.render(caption, q.question, options), order.index(q.answer), q.options[q.answer]


def _loss(model, prompts: list[list[int]], answers: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The answer's loss and the letter's alone, (), for rows ``prompt + answer`` left-padded, each ``answer`` the
    right letter then the option's text (what an instruct model writes: "B red"): the cross-entropy of the letter
    after the prompt (the token the reward reads) plus that of the option's words after the letter, summed per
    row and averaged over the rows. The option's words after the letter ask the reader to find a letter among the
    options and copy the word after it; that binding of letters to options is what the letter itself needs, and
    without it the letter's loss stayed at ln 4 (docs/notes/2026-12-02-qa-readers.md)."""
    rows = [p + a for p, a in zip(prompts, answers)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # cpu: the reader trains on the CPU (offline)
    mask = torch.zeros(len(rows), width, dtype=torch.long)  # cpu: (above)
    weight = torch.zeros(len(rows), width - 1)  # cpu: (above)
    letter_at = torch.empty(len(rows), dtype=torch.long)  # cpu: (above)
    for k, (p, r) in enumerate(zip(prompts, rows)):
        ids[k, width - len(r):], mask[k, width - len(r):] = torch.tensor(r), 1  # cpu: (above)
        letter_at[k] = width - len(r) + len(p) - 1  # the position whose next token is the letter
        weight[k, letter_at[k]:] = 1.0  # the letter and the option's words after it
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, :-1].float()  # (b, T-1, V)
    per = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (b, T-1)
    letter = per[torch.arange(len(rows), device=per.device), letter_at]  # (b,)
    return (per * weight).sum() / len(rows), letter.mean()


def _chance(qa: QASet, ids: Sequence[str], abstains: bool) -> float:
    """The letter's loss of a reader that guesses among the letters offered: the mean over the questions of
    ``ids`` of ln(options), one more with the abstain option (4 options: ln 4 = 1.386; with it ln 5 = 1.609)."""
    offered = [len(q.options) + abstains for i in ids for q in qa.of(i)]
    return sum(math.log(n) for n in offered) / len(offered)


def train_reader(folder: str | Path, captions: dict[str, list[str]], qa: QASet, size: str = "small", seed: int = 0,
                 steps: int | None = None, batch_size: int = 16, lr: float = 3e-3, joined: float = JOINED,
                 abstain: float = 0.0, negative: Negative | None = None) -> Path:
    """Build, train and save a reader in ``folder`` from the training images' ``captions`` (image id -> its
    references) and their questions in ``qa``; returns ``folder``. ``steps``: :func:`default_steps` when None.
    Learning rate: ``WARMUP`` steps of linear warm-up, constant, then down to 0 linearly over the last fifth; the
    lookup drill's share: :func:`lookup_share`;
    ``joined``: the share of the other examples whose caption is references joined (:func:`_example`);
    ``abstain``: the share of them whose caption is ``negative``'s and whose answer is :data:`ABSTAIN`, offered in
    every prompt when ``abstain`` > 0 (a reader for ``reward.qa_abstain``)."""
    steps = default_steps(abstain) if steps is None else steps
    for name, share in (("joined", joined), ("abstain", abstain)):
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"{name}: {share} is not a share between 0 and 1")
    if abstain and negative is None:
        raise ConfigError("abstain: a reader learns to abstain from captions that do not state the answer; "
                          "give negative, what writes them")
    import transformers

    ids = sorted(i for i in captions if qa.of(i) and captions[i])
    if not ids:
        raise ConfigError("no training image has both reference captions and questions")
    texts = [c for i in ids for c in captions[i]] + [
        " ".join([q.question, *q.options]) for i in ids for q in qa.of(i)] + ([ABSTAIN] if abstain else [])
    tokenizer = reader_tokenizer(texts)
    model = build_reader_model(len(tokenizer), size, seed)
    reader = QAReader(model, tokenizer)
    rng = random.Random(f"reader/{seed}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    decay = 0.8 * steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / WARMUP, (steps - s) / max(1.0, steps - decay)))
    model.train()
    chance = _chance(qa, ids, abstain > 0)
    recent: list[float] = []
    for step in range(steps):
        share = lookup_share(step, steps)
        batch = [_example(rng, captions, qa, ids, reader, share, joined, abstain, negative) for _ in range(batch_size)]
        prompts = [tokenizer.encode(p, add_special_tokens=False) for p, _, _ in batch]
        answers = [[int(reader.letter_ids[right])] + tokenizer.encode(text, add_special_tokens=False)
                   for _, right, text in batch]
        loss, letter = _loss(model, prompts, answers, tokenizer.pad_token_id)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        recent.append(letter.item())
        if (step + 1) % LOG_EVERY == 0:
            logger.info("reader step %d/%d: the letter's loss %.3f (chance: %.3f), lookup drill %.2f",
                        step + 1, steps, sum(recent) / len(recent), chance, share)
            recent = []
    model.eval()
    folder = Path(folder)
    with no_bars(transformers):
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

"""A text-only QA reader built and trained here, offline: a small OLMo-2 causal LM with a word-level tokenizer
trained on the captions and questions and a chat template with Qwen's turn markers, trained with plain torch to
answer a multiple-choice question about a picture from one of its reference captions (the next token after the
assistant's turn opens: the right option's letter). What ``rlcap data reader`` writes and the ``qa_utility``
reward and QA-acc read on shapes, where no pretrained reader can be downloaded; with a real captioner the reader
is a downloaded instruct model ([Xing26] use Qwen2.5-3B-Instruct; docs/RL.md).

Each training example draws an image of the training split, one of its reference captions, one of its questions
and an order of the options (uniform: the reader learns no letter); the loss is the cross-entropy of the right
letter at the last position, over the whole vocabulary (the probability the reward reads), weighted beside the
next-token loss of every other token of the prompt.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcap.data.qa import LETTERS, QASet
from rlcap.errors import ConfigError
from rlcap.models.qa_reader import INSTRUCTION, QAReader
from rlcap.transformers_io import no_bars

logger = logging.getLogger(__name__)

SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
# Qwen's turn markers, no system turn: the user's text, then the assistant's turn opened
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROMPT_WORDS = f"user assistant caption question {INSTRUCTION} " + " ".join(LETTERS)


@dataclass(frozen=True)
class ReaderSize:
    hidden: int
    layers: int
    heads: int


LOG_EVERY = 100
ANSWER_WEIGHT = 5.0  # the answer letter's weight in the loss beside each other token's 1

SIZES = {"small": ReaderSize(96, 3, 4), "base": ReaderSize(128, 4, 4)}


def reader_tokenizer(texts: Sequence[str]):
    """A word-level fast tokenizer of ``texts`` and the prompt's words, Qwen's turn markers special. Cased, unlike
    the captioners' (:func:`rlcap.models.hf.tokenizer_train.caption_tokenizer`): lower-cased, the option letter A
    would be the article a, the commonest word of the captions, which the reader must tell from the letter."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
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


def _example(rng: random.Random, captions: dict[str, list[str]], qa: QASet, ids: list[str],
             reader: QAReader) -> tuple[str, int]:
    image_id = rng.choice(ids)
    q = rng.choice(qa.of(image_id))
    order = rng.sample(range(len(q.options)), len(q.options))
    prompt = reader.render(rng.choice(captions[image_id]), q.question, [q.options[j] for j in order])
    return prompt, order.index(q.answer)


def _loss(model, rows: list[list[int]], pad_id: int) -> torch.Tensor:
    """The next-token cross-entropy of every real token of ``rows`` (left-padded), the answer letter's (each row's
    last) weighted ``ANSWER_WEIGHT`` times: the whole text's loss asks the reader to carry the caption's words
    into the options (copying), meant to help the lookup the answer needs form sooner than one answer token a
    prompt does. Neither loss made a reader read within 1,500 steps here (docs/notes/2026-12-02-qa-readers.md)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, width - len(r):], mask[k, width - len(r):] = torch.tensor(r), 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, :-1].float()  # (b, T-1, V)
    target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)  # (b, T-1)
    per = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # (b, T-1)
    weight = (target != -100).float()
    weight[:, -1] *= ANSWER_WEIGHT
    return (per * weight).sum() / weight.sum()


def train_reader(folder: str | Path, captions: dict[str, list[str]], qa: QASet, size: str = "small", seed: int = 0,
                 steps: int = 1500, batch_size: int = 64, lr: float = 3e-3) -> Path:
    """Build, train and save a reader in ``folder`` from the training images' ``captions`` (image id -> its
    references) and their questions in ``qa``; returns ``folder``."""
    import transformers

    ids = sorted(i for i in captions if qa.of(i) and captions[i])
    if not ids:
        raise ConfigError("no training image has both reference captions and questions")
    texts = [c for i in ids for c in captions[i]] + [
        " ".join([q.question, *q.options]) for i in ids for q in qa.of(i)]
    tokenizer = reader_tokenizer(texts)
    model = build_reader_model(len(tokenizer), size, seed)
    reader = QAReader(model, tokenizer)
    rng = random.Random(f"reader/{seed}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100) * (1 - s / steps))
    model.train()
    recent: list[float] = []
    for step in range(steps):
        batch = [_example(rng, captions, qa, ids, reader) for _ in range(batch_size)]
        rows = [tokenizer.encode(p, add_special_tokens=False) + [int(reader.letter_ids[right])] for p, right in batch]
        loss = _loss(model, rows, tokenizer.pad_token_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        recent.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            logger.info("reader step %d/%d: loss %.3f", step + 1, steps, sum(recent) / len(recent))
            recent = []
    model.eval()
    folder = Path(folder)
    with no_bars(transformers):
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

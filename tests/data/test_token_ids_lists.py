"""A config that declares a list of end tokens (GLM-4.1V's ``eos_token_id: [<|endoftext|>, <|user|>,
<|observation|>]``): rlcap's EOS is the tokenizer's eos where the list holds it, else the list's first, and the
other end tokens are never written (rlcap.data.hf_text.TokenIds.from_config)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rlcap.data.hf_text import TokenIds
from rlcap.data.vocab import BOS, EOS, PAD, UNK


class _Config(SimpleNamespace):
    def get_text_config(self):
        return self.text


def _config(**text):
    return _Config(text=SimpleNamespace(**text))


def test_the_tokenizers_eos_is_rlcaps_end_and_the_other_ends_are_never_written():
    config = _config(eos_token_id=[7, 3, 9], pad_token_id=7)
    ids = TokenIds.from_config(config, 12, SimpleNamespace(eos_token_id=3))
    assert (ids.end, ids.other_ends, ids.pad, ids.start) == (3, (7, 9), 7, 7)  # (no bos: the pad starts)
    assert ids.to_hf[EOS] == 3 and ids.to_hf[PAD] == 7
    logits = torch.arange(12, dtype=torch.float)[None]  # (1, V_hf): model id i scores i
    ours = ids.rlcap_logits(logits)[0]
    # never written: the other ends (7 is also the pad and the start: BOS's column, PAD's a second copy of it)
    # and UNK (none)
    dead = {ids.from_hf[9], ids.from_hf[7], PAD, UNK}
    assert ids.from_hf[7] == BOS and ids.from_hf[3] == EOS
    assert torch.isinf(ours[sorted(dead)]).all() and ours[EOS] == 3
    assert torch.isfinite(ours[[i for i in range(ids.size) if i not in dead]]).all()
    assert ids.to_dict()["other_ends"] == [7, 9]
    again = TokenIds(**ids.to_dict())  # (a checkpoint's vocab.json)
    assert again.other_ends == (7, 9) and torch.equal(again.dead, ids.dead)


def test_without_the_tokenizers_eos_in_the_list_the_first_ends():
    ids = TokenIds.from_config(_config(eos_token_id=[5, 6], bos_token_id=1), 8, SimpleNamespace(eos_token_id=2))
    assert (ids.end, ids.other_ends, ids.start) == (5, (6,), 1)
    assert torch.isinf(ids.rlcap_logits(torch.zeros(1, 8))[0, ids.from_hf[6]])


def test_one_end_token_as_before():
    ids = TokenIds.from_config(_config(eos_token_id=4, bos_token_id=1, pad_token_id=0), 6, None)
    assert (ids.end, ids.other_ends) == (4, ()) and not ids.dead[4:].any()
    old = {k: v for k, v in ids.to_dict().items() if k != "other_ends"}  # a vocab.json written before lists
    assert TokenIds(**old).other_ends == ()

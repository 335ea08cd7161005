"""The transformer captioner: a plain reference, step == forward, rows grouped per image == copies,
the hidden-state contract, the state dict and the dropout masks."""

import pytest
import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS
from rlcap.decoding import Decoding, beam_search, greedy, sample
from rlcap.models import Feats, ModelConfig, TransformerCaptioner, expand_batch, select_batch
from rlcap.models.transformer import Dropout

V, ATT_DIM, B, N, T, D = 19, 10, 3, 5, 7, 16


def build(dropout: float = 0.1) -> TransformerCaptioner:
    torch.manual_seed(0)
    cfg = ModelConfig(arch="transformer", hidden_dim=D, dropout=dropout, num_layers=2, num_enc_layers=2,
                      num_heads=4, ff_dim=24, max_len=8)
    return TransformerCaptioner(cfg, V, 6, ATT_DIM)


def make_feats() -> Feats:
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 2:] = False  # image 1 has 2 regions, image 2 has 4
    mask[2, 4:] = False
    return Feats(torch.randn(B, 6, generator=gen), torch.randn(B, N, ATT_DIM, generator=gen), mask)


def make_tokens(rows: int) -> torch.Tensor:
    tokens = torch.randint(3, V, (rows, T), generator=torch.Generator().manual_seed(1))
    tokens[:, 0] = BOS
    return tokens


def reference_logits(model: TransformerCaptioner, feats: Feats, tokens: torch.Tensor) -> torch.Tensor:
    """The model written plainly (eval mode): every row its own copy of its image, PyTorch's attention."""

    def mha(attn, x, mem, mask=None, causal=False):  # x (R, T, d), mem (R, S, d)
        r, t, d = x.shape
        split = lambda y: y.view(r, -1, attn.heads, d // attn.heads).transpose(1, 2)  # noqa: E731
        k, v = attn.kv(mem).chunk(2, dim=-1)
        y = F.scaled_dot_product_attention(split(attn.q(x)), split(k), split(v), attn_mask=mask, is_causal=causal)
        return attn.out(y.transpose(1, 2).reshape(r, t, d))

    feats = feats.expand(tokens.size(0) // feats.att.size(0))
    mask = feats.att_mask[:, None, None, :]  # (R, 1, 1, N)
    x = model.att_proj(feats.att)
    for layer in model.encoder:
        h = layer.ln1(x)
        x = x + mha(layer.attn, h, h, mask)
        x = x + layer.mlp(layer.ln2(x))
    memory = model.ln_mem(x)
    x = model.tok_emb(tokens) + model.pos_emb(torch.arange(tokens.size(1)))
    for layer in model.decoder:
        h = layer.ln1(x)
        x = x + mha(layer.self_attn, h, h, causal=True)
        x = x + mha(layer.cross_attn, layer.ln2(x), memory, mask)
        x = x + layer.mlp(layer.ln3(x))
    return model.logit(model.ln_f(x))


def step_through(model, memory, tokens):
    state, out = model.init_state(memory), []
    for t in range(tokens.size(1)):
        logprobs, state = model.step(memory, state, tokens[:, t])
        out.append(logprobs)
    return torch.stack(out, dim=1), state  # (R, T, V)


@pytest.mark.parametrize("n", [1, 3])
def test_forward_matches_the_plain_reference(n):
    model, feats, tokens = build().eval(), make_feats(), make_tokens(n * B)
    torch.testing.assert_close(model(feats, tokens, seq_per_img=n), reference_logits(model, feats, tokens),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("grouped", [True, False])
def test_step_by_step_logprobs_equal_forward_at_every_position(grouped):
    model, feats, tokens = build().eval(), make_feats(), make_tokens(3 * B)
    expand = model.expand_memory if grouped else expand_batch
    stepped, _ = step_through(model, expand(model.encode(feats), 3), tokens)
    forced = F.log_softmax(model(feats, tokens, seq_per_img=3), dim=-1)  # (3B, T, V)
    torch.testing.assert_close(stepped, forced, atol=1e-5, rtol=1e-5)


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_rows_grouped_per_image_give_the_values_and_gradients_of_copies():
    """Memory kept once per image (expand_memory) for n rows vs copied to every row: teacher
    forcing and step-by-step decoding give the same outputs and parameter gradients."""
    feats, tokens = make_feats(), make_tokens(3 * B)
    results = []
    for grouped in (True, False):
        model = build().eval()  # no dropout: copies would draw different masks
        logits = model(feats, tokens, seq_per_img=3) if grouped else model(feats.expand(3), tokens)
        memory = model.encode(feats)
        memory = model.expand_memory(memory, 3) if grouped else expand_batch(memory, 3)
        stepped, state = step_through(model, memory, tokens)
        (logits.log_softmax(-1)[..., 4].sum() + stepped[..., 5].sum() + model.hidden(state).sum()).backward()
        results.append((logits, stepped, grads(model)))
    (g_logits, g_stepped, g_grads), (c_logits, c_stepped, c_grads) = results
    torch.testing.assert_close(g_logits, c_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_stepped, c_stepped, atol=1e-5, rtol=1e-5)
    for name, grad in g_grads.items():
        torch.testing.assert_close(grad, c_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_hidden_is_the_vector_the_logits_come_from():
    model, feats, tokens = build().eval(), make_feats(), make_tokens(2 * B)
    memory = model.expand_memory(model.encode(feats), 2)
    state = model.init_state(memory)
    assert model.hidden(state).shape == (2 * B, D) and not model.hidden(state).any()
    for t in range(3):
        logprobs, state = model.step(memory, state, tokens[:, t])
        assert model.hidden(state).shape == (2 * B, D)
        torch.testing.assert_close(F.log_softmax(model.logit(model.hidden(state)), -1), logprobs)
    order = torch.tensor([5, 0, 3, 1, 2, 4])
    torch.testing.assert_close(model.hidden(select_batch(state, order)), model.hidden(state)[order])


def test_beam_search_on_grouped_memory_equals_copies():
    model, feats = build().eval(), make_feats()
    grouped = beam_search(model, feats, Decoding("beam", 6, beam_size=3), n_best=2)
    model.expand_memory = lambda memory, n: expand_batch(memory, n)  # copies, as models without their own
    copied = beam_search(model, feats, Decoding("beam", 6, beam_size=3), n_best=2)
    assert torch.equal(grouped.tokens, copied.tokens)
    torch.testing.assert_close(grouped.logprobs, copied.logprobs)


def test_sampling_with_dropout_backpropagates():
    model, feats = build(dropout=0.5).train(), make_feats()
    out = sample(model, feats, 4, Decoding("sample", 6), generator=torch.Generator().manual_seed(0))
    out.logprobs.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert greedy(model.eval(), feats, max_len=6).tokens.shape[0] == B


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_decode_then_score_equals_word_by_word_sampling(dropout):
    """With autograd, sample() decodes without it and scores the words in one pass under the same
    dropout masks: the same words, log-probabilities, entropies and parameter gradients as the
    word-by-word decode with autograd (TransformerCaptioner.scores_decoded = False)."""
    results = []
    for parallel in (True, False):
        model, feats = build(dropout=dropout).train(), make_feats()
        model.scores_decoded = parallel
        torch.manual_seed(3)  # the encoder's and the decoder's dropout masks, drawn in the same order
        out = sample(model, feats, 4, Decoding("sample", 8), generator=torch.Generator().manual_seed(0))
        advantage = torch.linspace(-1.0, 1.0, out.logprobs.size(0))[:, None]
        ((out.logprobs * advantage).sum() + 0.1 * out.entropy.sum()).backward()
        results.append((out, grads(model)))
    (fast, fast_grads), (slow, slow_grads) = results
    assert torch.equal(fast.tokens, slow.tokens) and torch.equal(fast.mask, slow.mask)
    assert fast.tokens.size(1) > 1 and bool((fast.logprobs < 0).any())
    torch.testing.assert_close(fast.logprobs, slow.logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast.entropy, slow.entropy, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast.scores, slow.scores, atol=1e-5, rtol=1e-5)
    for name, grad in fast_grads.items():
        torch.testing.assert_close(grad, slow_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_dropout_tape_rejects_a_pass_of_another_shape():
    model, feats = build(dropout=0.5).train(), make_feats()
    memory = model.expand_memory(model.encode(feats), 2)
    tokens = make_tokens(2 * B)[:, :4]
    with torch.no_grad(), model.record_dropout() as tape:
        state = model.init_state(memory)
        for t in range(3):  # three steps recorded
            _, state = model.step(memory, state, tokens[:, t])
    with pytest.raises(RuntimeError, match="do not split into 4 steps"):
        model.score_decoded(memory, tokens, tape)
    model.score_decoded(memory, tokens[:, :3], tape)  # the three steps' own words: accepted


def test_state_dict_keys_are_unchanged():
    """Checkpoints of earlier versions load: one encoder and one decoder layer's names, and the rest."""
    keys = set(build().state_dict())
    linear = lambda prefix: {f"{prefix}.weight", f"{prefix}.bias"}  # noqa: E731
    attn = lambda prefix: linear(f"{prefix}.q") | linear(f"{prefix}.kv") | linear(f"{prefix}.out")  # noqa: E731
    enc = linear("encoder.0.ln1") | linear("encoder.0.ln2") | attn("encoder.0.attn") | linear(
        "encoder.0.mlp.0") | linear("encoder.0.mlp.2")
    dec = (linear("decoder.0.ln1") | linear("decoder.0.ln2") | linear("decoder.0.ln3") | attn("decoder.0.self_attn")
           | attn("decoder.0.cross_attn") | linear("decoder.0.mlp.0") | linear("decoder.0.mlp.2"))
    top = linear("att_proj.0") | linear("ln_mem") | linear("ln_f") | linear("logit") | {"tok_emb.weight",
                                                                                        "pos_emb.weight"}
    expected = top | enc | {k.replace(".0.", ".1.", 1) for k in enc} | dec | {k.replace(".0.", ".1.", 1) for k in dec}
    assert keys == expected


def test_dropout_zeroes_a_fraction_p_and_keeps_the_mean():
    torch.manual_seed(0)
    x = torch.ones(200_000)
    y = Dropout(0.3)(x)
    assert abs(float((y == 0).float().mean()) - 0.3) < 0.005
    torch.testing.assert_close(torch.unique(y), torch.tensor([0.0, 1 / 0.7]))
    assert abs(float(y.mean()) - 1.0) < 0.01
    assert torch.equal(Dropout(0.3).eval()(x), x)

import pytest
import torch

from rlcap.models.attention import additive_scores, weighted_sum


def inputs(n: int, dtype=torch.float64, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(3, 4, 5, dtype=dtype, generator=gen)  # 3 images, 4 regions
    query = torch.randn(3, n, 5, dtype=dtype, generator=gen)  # n rows per image
    w = torch.randn(5, dtype=dtype, generator=gen)
    values = torch.randn(3, 4, 6, dtype=dtype, generator=gen)
    weights = torch.rand(3, n, 4, dtype=dtype, generator=gen)
    return keys, query, w, values, weights


@pytest.mark.parametrize("n", [1, 3])
def test_gradients_pass_gradcheck(n):
    keys, query, w, values, weights = (t.requires_grad_() for t in inputs(n))
    assert torch.autograd.gradcheck(additive_scores, (keys, query, w))
    assert torch.autograd.gradcheck(weighted_sum, (weights, values))


def plain_scores(keys, query, w):  # the formula, per row, on regions copied to every row
    return (torch.sigmoid(keys.unsqueeze(1) + query.unsqueeze(2)) * w).sum(3)


def plain_sum(weights, values):
    return (weights.unsqueeze(3) * values.unsqueeze(1)).sum(2)


@pytest.mark.parametrize("n", [1, 5])
def test_values_and_gradients_match_autograd_of_the_plain_formulas(n):
    keys, query, w, values, _ = inputs(n, torch.float32, seed=n)
    upstream = torch.randn(3, n, 6, generator=torch.Generator().manual_seed(9))

    def run(scores_fn, sum_fn):
        leaves = [t.clone().requires_grad_() for t in (keys, query, w, values)]
        k, q, wa, v = leaves
        out = sum_fn(scores_fn(k, q, wa).softmax(2), v)  # (3, n, 6)
        (out * upstream).sum().backward()
        return out, [t.grad for t in leaves]

    out, grads = run(additive_scores, weighted_sum)
    ref_out, ref_grads = run(plain_scores, plain_sum)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_rows_of_one_image_match_that_image_alone():
    keys, query, w, values, weights = inputs(3)
    scores, mixed = additive_scores(keys, query, w), weighted_sum(weights, values)
    for image in range(3):
        for row in range(3):
            alone = additive_scores(keys[image : image + 1], query[image : image + 1, row : row + 1], w)
            torch.testing.assert_close(scores[image, row], alone[0, 0])
            torch.testing.assert_close(mixed[image, row], weights[image, row] @ values[image])


def test_run_in_inference_mode():
    keys, query, w, values, weights = inputs(2, torch.float32)
    with torch.inference_mode():
        torch.testing.assert_close(additive_scores(keys, query, w), plain_scores(keys, query, w))
        torch.testing.assert_close(weighted_sum(weights, values), plain_sum(weights, values))

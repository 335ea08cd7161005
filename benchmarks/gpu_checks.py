"""What two devices must agree on, compared for one small captioner: the checks of ``gpu_check.py``.

A device is compared with a reference device (the CPU) on what is deterministic across devices, from
the same weights and the same inputs, in fp32 with TF32 off (:func:`exact_fp32`). Each comparison
gives :class:`Comparison` rows; their bounds are :data:`TOLERANCES`:

1. teacher forcing, dropout off: every word's log-probability (the full log-softmax at each real
   position), max |a - b| <= ``logprob``; the XE loss, |a - b| <= ``loss`` x |a|.
2. the SCST loss (``reinforce_loss`` on teacher-forced log-probabilities of fixed sampled captions, with
   fixed advantages, dropout off), |a - b| <= ``loss`` x the mean |A log p| of its terms (advantages of
   both signs may cancel the loss itself to near 0), and its gradients: for each parameter
   max |g_a - g_b| <= ``grad`` x max |g_a| (normalised by the tensor's largest entry: an entry that
   cancels to near 0 has no meaningful relative error of its own).
3. greedy and beam decodes (``beam_size`` 3): the same tokens, exactly; the log-probability of each
   word within ``logprob`` (over each caption's words up to the first that differs).
4. the reward on the same tokens: ``rlcap.rewards.cider_device.CiderDDeviceReward`` on device b
   against the CPU's CIDEr-D reward on device a's greedy captions, max |a - b| <= ``reward``.
5. sampling, which draws from each device's own random stream, statistically: the mean CIDEr-D of
   ``samples`` captions sampled on each device (dropout on, as SCST samples), the two means within the
   ``confidence`` (99.9%) bound of their difference, z x sqrt(s_a^2 / n_a + s_b^2 / n_b) from the two
   samples' standard deviations. Device a and b draw with different seeds, so CPU against CPU is a
   real test of the statistic too.

The bounds leave room for rounding: a copy whose linear layers compute in float64 (rounding differences
of the size two fp32 devices make) stays 15x or more inside each (log-probabilities about 6e-6 apart,
gradients 2e-6, at the default sizes), while one layer computed in bfloat16 fails them
(tests/test_gpu_check.py).

The data is generated here: images whose regions encode a colour, a shape, a size and a place, with
captions from four templates, and a captioner taught them by a short XE run, so that sampled captions
have caption-like lengths and rewards vary. Tests call :func:`run_checks` with both
devices ``cpu``, and :func:`compare` with a second copy that was tampered with.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch

from rlcap.data.feats import Feats
from rlcap.data.loader import Batch
from rlcap.data.vocab import BOS, EOS, PAD, SPECIALS, Vocab
from rlcap.decoding import Decoding, beam_search, greedy, sample
from rlcap.models import build_model
from rlcap.models.model_config import ModelConfig
from rlcap.rewards import CiderDReward, RewardBatch
from rlcap.rewards.cider_device import CiderDDeviceReward
from rlcap.rl.losses import reinforce_loss, xe_loss
from rlcap.methods.samples import teacher_forced_logprobs

ARCHS = ("fc", "updown", "transformer")
TOLERANCES = {"logprob": 1e-4, "loss": 1e-5, "grad": 1e-4, "reward": 1e-4, "confidence": 0.999}
BEAM = 3
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange"]
SHAPES = ["circle", "square", "triangle", "star", "cross", "ring"]
SIZES = ["small", "big", "tiny"]
PLACES = ["left", "right", "top", "bottom"]
TEMPLATES = ["a {size} {colour} {shape} on the {place}", "a {colour} {shape}", "{colour} {shape} {place}",
             "there is a {size} {colour} {shape} at the {place} of the picture"]


@dataclass(frozen=True)
class CheckSizes:
    """How big the generated set, the model and the samples are."""

    images: int = 50
    hidden: int = 64
    xe_steps: int = 150
    samples: int = 1000  # sampled captions a device (check 5): a multiple of ``images``
    max_len: int = 14
    seed: int = 0


class Setup(NamedTuple):
    """A captioner after XE on the CPU (eval mode) and the inputs every comparison shares (CPU tensors)."""

    arch: str
    model: torch.nn.Module
    vocab: Vocab
    ids: list[str]
    refs: list[list[str]]
    feats: Feats
    tokens: torch.Tensor  # (B*S, L+2) the references, BOS w1..wn EOS PAD..
    fixed: torch.Tensor  # (B*2, T) captions sampled once on the CPU, for the SCST gradients
    advantages: torch.Tensor  # (B*2,) fixed advantages of those captions
    sizes: CheckSizes


class Comparison(NamedTuple):
    arch: str
    check: str  # what was compared, e.g. "teacher-forced log-probs"
    value: float  # the difference found
    bound: float  # the largest difference that passes
    passed: bool
    detail: str  # where the difference was largest, or why nothing was compared


@contextmanager
def exact_fp32() -> Iterator[None]:
    """TF32 off for CUDA matrix products and cuDNN while inside (its 10-bit mantissa would exceed every bound)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def model_config(arch: str, hidden: int) -> ModelConfig:
    return ModelConfig(arch=arch, embed_dim=hidden, hidden_dim=hidden, att_hidden_dim=hidden, dropout=0.2,
                       num_layers=2, num_enc_layers=1, num_heads=4, ff_dim=2 * hidden, max_len=20)


def shapes_data(images: int, dim: int, seed: int) -> tuple[list[list[str]], Feats]:
    """Every image's 4 captions and its features: 4 regions, each one attribute's code plus noise."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    values = COLOURS + SHAPES + SIZES + PLACES
    codes = torch.randn(len(values), dim, generator=gen)  # (A, D) one vector an attribute value
    refs, rows = [], []
    for _ in range(images):
        attrs = {"colour": rng.choice(COLOURS), "shape": rng.choice(SHAPES), "size": rng.choice(SIZES),
                 "place": rng.choice(PLACES)}
        refs.append([t.format(**attrs) for t in rng.sample(TEMPLATES, len(TEMPLATES))])
        rows.append([values.index(v) for v in attrs.values()])
    att = codes[torch.tensor(rows)] + 0.3 * torch.randn(images, 4, dim, generator=gen)  # (B, 4, D)
    return refs, Feats(att.mean(1), att, torch.ones(images, 4, dtype=torch.bool))


def encode(refs: list[list[str]], vocab: Vocab, max_len: int) -> torch.Tensor:
    """(B*S, max_len+2): BOS, the words, EOS, PAD."""
    tokens = torch.full((sum(map(len, refs)), max_len + 2), PAD, dtype=torch.long)
    for row, caption in enumerate(c for captions in refs for c in captions):
        ids = vocab.encode(caption.split())[:max_len]
        tokens[row, :len(ids) + 2] = torch.tensor([BOS, *ids, EOS])
    return tokens


def make_setup(arch: str, sizes: CheckSizes = CheckSizes(), device: str = "cpu") -> Setup:
    """The generated set and a captioner of ``arch`` taught it by ``sizes.xe_steps`` full-batch XE steps
    on ``device`` (where they are fastest: the weights are only a starting point), returned on the CPU."""
    torch.manual_seed(sizes.seed)
    refs, feats = shapes_data(sizes.images, sizes.hidden, sizes.seed)
    vocab = Vocab([*SPECIALS, *sorted({w for captions in refs for c in captions for w in c.split()})])
    tokens = encode(refs, vocab, sizes.max_len)
    model = build_model(model_config(arch, sizes.hidden), len(vocab), sizes.hidden, sizes.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    on_device, targets = feats.to(device), tokens.to(device)
    with exact_fp32():
        for _ in range(sizes.xe_steps):
            logits = model(on_device, targets[:, :-1], seq_per_img=len(TEMPLATES))  # (B*S, L+1, V)
            loss = xe_loss(logits, targets[:, 1:], targets[:, 1:] != PAD)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.cpu().eval()
    gen = torch.Generator().manual_seed(sizes.seed)
    with torch.no_grad():
        fixed = sample(model, feats, 2, Decoding("sample", sizes.max_len), generator=gen).tokens  # (B*2, T)
    advantages = torch.randn(fixed.size(0), generator=gen)
    ids = [str(i) for i in range(sizes.images)]
    return Setup(arch, model, vocab, ids, refs, feats, tokens, fixed, advantages, sizes)


def row(setup: Setup, check: str, value: float, bound: float, detail: str) -> Comparison:
    return Comparison(setup.arch, check, value, bound, bool(value <= bound), detail)  # NaN fails


Models = tuple[torch.nn.Module, torch.nn.Module]  # the captioner on device a and on device b
Devices = tuple[str, str]


def teacher_forced(setup: Setup, models: Models, devices: Devices) -> list[Comparison]:
    """Check 1: the log-softmax at every real position and the XE loss, dropout off."""
    out = []
    for model, device in zip(models, devices):
        model.eval()
        tokens = setup.tokens.to(device)
        with torch.no_grad():
            logits = model(setup.feats.to(device), tokens[:, :-1], seq_per_img=len(TEMPLATES))  # (N, L+1, V)
            loss = xe_loss(logits, tokens[:, 1:], tokens[:, 1:] != PAD)
        out.append((logits.float().log_softmax(-1).cpu(), float(loss)))
    (lp_a, loss_a), (lp_b, loss_b) = out
    real = (setup.tokens[:, 1:] != PAD)[:, :, None].expand_as(lp_a)  # (N, L+1, V)
    diff = torch.where(real, (lp_a - lp_b).abs(), 0.0)
    r, t, w = divmod_index(int(diff.argmax()), diff.shape)
    where = f"caption {r}, position {t}, word {setup.vocab.itos[w]!r}" if float(diff.max()) > 0 else "none differs"
    tol = TOLERANCES
    return [row(setup, "teacher-forced log-probs", float(diff.max()), tol["logprob"], where),
            row(setup, "XE loss", abs(loss_a - loss_b), tol["loss"] * abs(loss_a), f"{loss_a:.6f} and {loss_b:.6f}")]


def divmod_index(flat: int, shape: torch.Size) -> list[int]:
    """The index of each dimension of a flat index into a tensor of ``shape``."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return index[::-1]


def scst_gradients(setup: Setup, models: Models, devices: Devices) -> list[Comparison]:
    """Check 2: the REINFORCE loss of the fixed captions and advantages, and each parameter's gradient."""
    losses, grads, sizes = [], [], []
    for model, device in zip(models, devices):
        model.eval()
        model.zero_grad(set_to_none=True)
        feats, tokens = setup.feats.to(device), setup.fixed.to(device)
        batch = Batch(torch.arange(len(setup.ids)), setup.ids, feats, tokens, setup.refs)
        logprobs, _ = teacher_forced_logprobs(model, batch, tokens, 2)  # (B*2, T)
        advantages = setup.advantages.to(device)
        loss = reinforce_loss(logprobs, tokens != PAD, advantages)
        loss.backward()
        losses.append(loss.item())
        # the size of the loss's terms, mean |A log p|: the loss itself may cancel to near 0
        sizes.append(abs(reinforce_loss(logprobs.detach().abs(), tokens != PAD, advantages.abs()).item()))
        grads.append({name: None if p.grad is None else p.grad.cpu() for name, p in model.named_parameters()})
    worst, where = -1.0, "no parameter has a gradient"
    for name, g_a in grads[0].items():
        g_b = grads[1][name]
        if g_a is None or g_b is None:
            if (g_a is None) != (g_b is None):
                return [row(setup, "SCST gradients", math.inf, TOLERANCES["grad"],
                            f"{name}: a gradient on one device only")]
            continue
        scale = float(g_a.abs().max())
        error = float((g_a - g_b).abs().max()) / scale if scale > 0 else float((g_a - g_b).abs().max())
        if not error <= worst:  # NaN too
            worst, where = error, f"{name} (its largest entry {scale:.2e})"
    loss_a, loss_b = losses
    return [row(setup, "SCST loss", abs(loss_a - loss_b), TOLERANCES["loss"] * sizes[0],
                f"{loss_a:.6f} and {loss_b:.6f} (its terms' mean size {sizes[0]:.4f})"),
            row(setup, "SCST gradients", max(worst, 0.0), TOLERANCES["grad"], f"largest in {where}")]


def decodes(setup: Setup, models: Models, devices: Devices) -> tuple[list[Comparison], torch.Tensor]:
    """Check 3: greedy and beam decodes, dropout off; also returns device a's greedy tokens (for check 4)."""
    results = {"greedy": [], f"beam {BEAM}": []}
    for model, device in zip(models, devices):
        model.eval()
        feats = setup.feats.to(device)
        results["greedy"].append(greedy(model, feats, setup.sizes.max_len))
        beam = Decoding.on(device, "beam", setup.sizes.max_len, compile=False, beam_size=BEAM)  # (as greedy: auto)
        results[f"beam {BEAM}"].append(beam_search(model, feats, beam))
    rows = []
    for name, (a, b) in results.items():
        tok_a, tok_b = a.tokens.cpu(), b.tokens.cpu()
        width = max(tok_a.size(1), tok_b.size(1))
        tok_a, tok_b = pad_to(tok_a, width), pad_to(tok_b, width)
        lp_a, lp_b = pad_to(a.logprobs.cpu(), width, 0.0), pad_to(b.logprobs.cpu(), width, 0.0)
        differ = tok_a != tok_b  # (R, T)
        if bool(differ.any()):
            r, t = divmod_index(int(differ.flatten().nonzero()[0]), differ.shape)
            words = [setup.vocab.itos[int(x[r, t])] for x in (tok_a, tok_b)]
            detail = f"{int(differ.any(1).sum())} of {len(differ)} captions; first: caption {r}, position {t}: {words}"
        else:
            detail = f"all {len(differ)} captions"
        rows.append(row(setup, f"{name} tokens", float(differ.any(1).sum()), 0.0, detail))
        common = (~differ).cumprod(1).bool()  # (R, T) words of the two prefixes that agree so far: comparable
        diff = (lp_a - lp_b).abs()[common]
        rows.append(row(setup, f"{name} log-probs", float(diff.max()) if diff.numel() else 0.0, TOLERANCES["logprob"],
                        f"over the {int(common.sum())} words of the common prefixes"))
    return rows, results["greedy"][0].tokens.cpu()


def pad_to(x: torch.Tensor, width: int, value: float = PAD) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.size(1)), value=value)


def cpu_reward(setup: Setup) -> CiderDReward:
    return CiderDReward(dict(zip(setup.ids, setup.refs)), eos_counts=True)


def captions(setup: Setup, tokens: torch.Tensor) -> list[str]:
    return [setup.vocab.decode(r) for r in tokens.tolist()]


def device_reward(setup: Setup, device: str) -> CiderDDeviceReward:
    """Check 4's reward: CIDEr-D computed from the token ids on ``device`` (``reward.device``)."""
    return CiderDDeviceReward(dict(zip(setup.ids, setup.refs)), setup.vocab, eos_counts=True, device=device)


def reward_on_tokens(setup: Setup, tokens: torch.Tensor, device: str) -> list[Comparison]:
    """Check 4: the device CIDEr-D reward of ``tokens`` on ``device`` against the CPU reward of the same captions."""
    reward = device_reward(setup, device)
    expected = cpu_reward(setup)(captions(setup, tokens), RewardBatch(setup.ids, setup.refs))
    scores = reward.score_tokens(tokens.to(device), setup.ids).float().cpu()
    diff = (scores - expected).abs()
    worst = int(diff.argmax())
    return [row(setup, "CIDEr-D reward, device against CPU", float(diff.max()), TOLERANCES["reward"],
                f"caption {worst}: {float(expected[worst]):.4f} and {float(scores[worst]):.4f}")]


def sampled_rewards(setup: Setup, model: torch.nn.Module, device: str, seed: int) -> list[float]:
    """CIDEr-D of ``sizes.samples`` captions sampled on ``device`` (dropout on, as SCST samples), ``seed``'s stream."""
    model.train()
    n = setup.sizes.samples // len(setup.ids)
    with torch.no_grad():
        sampling = Decoding.on(device, "sample", setup.sizes.max_len, compile=False)
        out = sample(model, setup.feats.to(device), n, sampling,
                     generator=torch.Generator(device=device).manual_seed(seed))
    model.eval()
    batch = RewardBatch([i for i in setup.ids for _ in range(n)], [r for r in setup.refs for _ in range(n)])
    return cpu_reward(setup)(captions(setup, out.tokens.cpu()), batch).tolist()


def sampling(setup: Setup, models: Models, devices: Devices) -> list[Comparison]:
    """Check 5: the two devices' mean sampled reward within the confidence bound of their difference."""
    a, b = (sampled_rewards(setup, m, d, seed) for m, d, seed in zip(models, devices, (1, 2)))
    z = statistics.NormalDist().inv_cdf(1 - (1 - TOLERANCES["confidence"]) / 2)  # 3.29 at 99.9%
    bound = z * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    return [row(setup, f"mean CIDEr-D of {len(a)} samples", abs(mean_a - mean_b), bound,
                f"{mean_a:.4f} (sd {statistics.stdev(a):.3f}) and {mean_b:.4f} (sd {statistics.stdev(b):.3f})")]


def compare(setup: Setup, model_b: torch.nn.Module, devices: Devices) -> list[Comparison]:
    """Every check: ``setup.model`` on ``devices[0]`` against ``model_b`` (a copy of it, normally) on ``devices[1]``."""
    models = (copy.deepcopy(setup.model).to(devices[0]), model_b.to(devices[1]))
    with exact_fp32():
        rows = teacher_forced(setup, models, devices) + scst_gradients(setup, models, devices)
        decoded, tokens = decodes(setup, models, devices)
        return rows + decoded + reward_on_tokens(setup, tokens, devices[1]) + sampling(setup, models, devices)


def run_checks(arch: str, sizes: CheckSizes = CheckSizes(), devices: Devices = ("cpu", "cuda")) -> list[Comparison]:
    """Every check of ``arch``: the captioner taught on ``devices[1]``, the same weights on both devices."""
    setup = make_setup(arch, sizes, devices[1])
    return compare(setup, copy.deepcopy(setup.model), devices)


def failures(rows: list[Comparison]) -> list[str]:
    """One line per failed comparison: the model, the check, the difference, the bound and where."""
    return [f"{r.arch}: {r.check}: {r.value:.3g} > {r.bound:.3g} ({r.detail})" for r in rows if not r.passed]

"""The vision-language test matrix's shared parts (tests/models/test_hf_vlm.py at tiny size, test_hf_vlm_mini.py
at mini): pictures of three sizes, a family's folder with its store and reference model, captions in the model's
words, and the teacher-forced check against the model's own forward."""

from __future__ import annotations

import numpy as np
import torch

CAPTIONS = ["a red circle on the left", "a big blue square", "a small green triangle", "the red square ."]
SIZES = ((16, 48), (40, 16), (32, 32))  # (height, width): a Qwen2-VL grid and an Idefics3 tiling each


def pictures():
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in SIZES]


def built_family(family, folder, size="tiny"):
    """(folder, policy in eval mode, its reference model, the pictures, their Feats) for ``family`` built in
    ``folder`` at ``size``."""
    import transformers

    from rlcap.data.feats import Feats
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.models.hf.build_vlm import build_vlm
    from rlcap.models.hf.vlm import HFVLMCaptioner

    shown = pictures()
    folder = build_vlm(family, folder, CAPTIONS, size=size)
    encoder = load_vlm_encoder(folder)
    fc, att, counts = encoder.features_with_counts(torch.from_numpy(encoder.prepare(shown)))
    feats = Feats(fc, att, torch.arange(att.shape[1])[None] < counts[:, None])
    reference = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
    return folder, HFVLMCaptioner(folder).eval(), reference, shown, feats


def captions(policy):
    from rlcap.models.hf.vlm import vlm_codec

    vocab = vlm_codec(policy.folder)
    rows = [[1, *vocab.encode(c.split()), 2] for c in ("a red circle", "a big blue square on the", "small green")]
    width = max(map(len, rows))
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])  # (3, T) from BOS, PAD after EOS


def their_inputs(policy, picture):
    inputs = policy.processor(text=[policy.prompt], images=[[picture]], return_tensors="pt")
    return {k: v for k, v in inputs.items() if k != "labels"}


def caption_types(model, inputs, n):
    """The prompt's token types extended over ``n`` caption words as ``generate()`` extends them, by the model's own
    update one word a step (PaliGemma's: the causal suffix, 1; Qwen2-VL's and Gemma 3's: text, 0; Gemma 3's 1
    would put the caption in a picture, read both ways)."""
    kwargs = {k: inputs[k] for k in ("token_type_ids", "mm_token_type_ids") if k in inputs}
    for _ in range(n):
        kwargs = model._update_model_kwargs_for_generation({}, kwargs, num_new_tokens=1)
    return {k: kwargs[k] for k in ("token_type_ids", "mm_token_type_ids") if k in kwargs}


def check_teacher_forced(policy, reference, pictures, feats) -> None:
    """rlcap's teacher-forced log-probabilities of three captions from the stored tokens equal the model's own
    forward from each picture's pixels and the prompt (1e-4)."""

    tokens = captions(policy)
    with torch.no_grad():
        ours = torch.log_softmax(policy(feats, tokens), dim=-1)  # (3, T, V)
        for i, picture in enumerate(pictures):
            inputs = their_inputs(policy, picture)
            prompt = inputs["input_ids"].shape[1]
            words = policy.ids.hf_ids(tokens[i:i + 1, 1:])  # the caption after BOS
            inputs["input_ids"] = torch.cat([inputs["input_ids"], words], 1)
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
            inputs.update(caption_types(reference, inputs, words.shape[1]))
            logits = reference(**inputs).logits[0, prompt - 1:].float()  # (T, V_hf)
            theirs = torch.log_softmax(policy.ids.rlcap_logits(logits), dim=-1)
            real = tokens[i, 1:] != 0
            pick = tokens[i, 1:, None]
            torch.testing.assert_close(ours[i, :-1].gather(1, pick)[real], theirs[:-1].gather(1, pick)[real],
                                       rtol=1e-4, atol=1e-4)


def tiny_vlm_run(folder, family="qwen2_vl", store=None, dtype="float16"):
    """The tiny caption set with its pictures in ``folder``, a ``family`` model built on its captions, and, when
    ``store`` names a file in ``folder``, the store of its image tokens (``rlcap features``, ``dtype``):
    (dataset, model folder, store path or None)."""
    import json

    from rlcap.cli import main
    from rlcap.models.hf.build_vlm import build_vlm
    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset

    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    model = build_vlm(family, folder / "captioner", captions)
    if store is None:
        return dataset, model, None
    path = folder / store
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}", "--out", str(path),
                 "--dtype", dtype]) == 0
    return dataset, model, path

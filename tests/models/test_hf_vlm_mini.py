"""Every vision-language family at its ``mini`` size (a 64-wide 2-layer vision tower, a 128-wide 2-layer language
model, 64-px pictures: where tiles, grids and DeepStack layers differ from ``tiny``'s): rlcap's teacher-forced
log-probabilities from the stored tokens equal the model's own forward from the pixels (1e-4). The whole matrix at
``tiny``: tests/models/test_hf_vlm.py."""

from __future__ import annotations

import pytest

from rlcap.models.hf.build_vlm import VLM_FAMILIES
from tests.models.vlm_matrix import built_family, check_teacher_forced

pytest.importorskip("transformers")


@pytest.mark.slow  # (a mini folder, its store and its reference model, each)
@pytest.mark.parametrize("family", [f for f in VLM_FAMILIES if f != "florence2"])
def test_mini_teacher_forced_logprobs_are_the_models_own_forward(family, tmp_path):
    folder, policy, reference, pictures, feats = built_family(family, tmp_path / family, size="mini")
    check_teacher_forced(policy, reference, pictures, feats)

"""An online run's policy keeps aside the online encoder's image side, not a second copy of it
(rlcap.models.base.share_image_side): one copy a process, shared by the KL reference too, and its export writes
the same tower as a store run's; weights that differ, or an image side that trains, are not taken."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from rlcap import api
from rlcap.encoders.online import OnlineFeatures
from rlcap.models.base import share_image_side
from rlcap.methods.reference import REFERENCE, add_reference
from rlcap.train.session import open_session
from tests.models.vlm_matrix import tiny_vlm_run
from tests.tiny import tiny_overrides

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """(dataset, the pictures' folder, the tiny Qwen2-VL's folder)."""
    folder = tmp_path_factory.mktemp("online_side")
    dataset, model, _ = tiny_vlm_run(folder)
    return dataset, folder, model


def _config(qwen, out, **extra):
    dataset, pictures, model = qwen
    overrides = tiny_overrides(dataset, "", out, **{"model.arch": "hf", "model.path": model, "xe.epochs": 1,
                                                    "max_steps": 2, "data.images": pictures, **extra})
    return api.load_run_config(None, overrides)


def _encoder(session):
    features = session.data.splits["train"].features
    assert isinstance(features, OnlineFeatures)
    return features.image_encoder


def test_the_policy_keeps_the_online_encoder_s_image_side(qwen, tmp_path):
    from rlcap.models.hf.vlm import HFVLMCaptioner

    dataset, pictures, model = qwen
    own = HFVLMCaptioner(model).frozen_aside()[0]  # a policy built alone holds its own copy
    session = open_session(_config(qwen, tmp_path / "run", **{"algorithm": "grpo", "rl.kl_coef": 0.04}))
    policy, tower = session.parts["policy"].module, _encoder(session).tower
    side = policy.frozen_aside()
    assert len(side) == 1 and side[0] is tower  # the encoder's modules, not equal ones
    assert own is not tower and own.state_dict().keys() == tower.state_dict().keys()
    # the KL reference shares it as well (rlcap.methods.reference): still one copy
    add_reference(session)
    assert session.parts[REFERENCE].module.frozen_aside()[0] is tower


def test_the_policy_s_own_copy_is_freed(qwen):
    """What share_image_side does in a session: the policy's copy is no longer held once it takes the encoder's."""
    from rlcap.encoders.load import load_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner

    dataset, pictures, model = qwen
    policy = HFVLMCaptioner(model)
    gone = weakref.ref(next(policy.frozen_aside()[0].parameters()))
    encoder = load_encoder(f"hf:{model}", None, "cpu")
    features = OnlineFeatures({}, [], encoder, model)
    assert share_image_side(policy, [features])
    gc.collect()
    assert gone() is None


def test_other_weights_or_a_trained_side_are_not_taken(qwen):
    from rlcap.encoders.load import load_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner

    dataset, pictures, model = qwen
    encoder = load_encoder(f"hf:{model}", None, "cpu")
    with torch.no_grad():
        next(encoder.tower.parameters()).add_(1e-3)  # another tower's weights: the same names and shapes
    policy = HFVLMCaptioner(model)
    own = policy.frozen_aside()[0]
    assert not share_image_side(policy, [OnlineFeatures({}, [], encoder, model)])
    assert policy.frozen_aside()[0] is own
    trains = HFVLMCaptioner(model, train_vision="all")
    assert not trains.adopt_image_side(load_encoder(f"hf:{model}", None, "cpu").tower)


def test_the_export_writes_the_tower_a_store_run_writes(qwen, tmp_path):
    """The online run's hf/ export tower (written from the encoder's modules) holds the folder's tower, as a store
    run's does."""
    from safetensors.torch import load_file

    from rlcap.models.hf.export import TOWER_FILE

    dataset, pictures, model = qwen
    api.train(_config(qwen, tmp_path / "online"))
    written = load_file(str(tmp_path / "online" / "last" / "hf" / TOWER_FILE))
    from rlcap.models.hf.vlm import HFVLMCaptioner

    side = HFVLMCaptioner(model).weights.side
    expected = side.state()
    assert written.keys() == expected.keys()
    assert all(torch.equal(written[k], expected[k]) for k in expected)

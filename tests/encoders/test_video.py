"""Video files through PyAV: frame sampling, errors on corrupt or empty files, and frame features
in the store (frames as the region axis), resumable."""

import numpy as np
import pytest
from PIL import Image

from rlcap.encoders.video import extract_video_features, frame_indices, read_frames
from rlcap.errors import DataError

av = pytest.importorskip("av")


def write_clip(path, frames=24, fps=8, size=64):
    """A red square moving left to right on black, frame k's square at x = 2k (H.264 in MP4)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            pixels = np.zeros((size, size, 3), dtype=np.uint8)
            pixels[24:40, 2 * k:2 * k + 16] = (255, 0, 0)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def red_x(img: Image.Image) -> float:
    """Mean column of the red pixels."""
    a = np.asarray(img).astype(int)
    cols = np.nonzero((a[..., 0] > 150) & (a[..., 1] < 100))[1]
    return float(cols.mean())


def test_evenly_spaced_frames_in_order(tmp_path):
    write_clip(tmp_path / "clip.mp4")
    frames = read_frames(tmp_path / "clip.mp4", n_frames=4)
    assert len(frames) == 4 and frames[0].size == (64, 64)
    xs = [red_x(f) for f in frames]
    # frames 3, 9, 15, 21 of 24 (the centre of each quarter): the square's centre at 2k + 7.5
    assert xs == pytest.approx([13.5, 25.5, 37.5, 49.5], abs=1.5)
    assert len(read_frames(tmp_path / "clip.mp4", fps=2.0)) == 6  # 24 frames at 8 fps: t = 0 .. 2.875 s, every 0.5 s


def test_indices_by_hand():
    assert frame_indices([0, 1, 2, 3, 4, 5, 6, 7], 4, None, 64) == [1, 3, 5, 7]
    assert frame_indices([0, 1, 2], 5, None, 64) == [0, 0, 1, 2, 2]  # a short clip repeats frames
    assert frame_indices([0.0, 0.5, 1.0, 1.5, 2.0], 0, 1.0, 64) == [0, 2, 4]
    assert frame_indices([0.0, 0.5, 1.0, 1.5, 2.0], 0, 1.0, 2) == [0, 2]


def test_corrupt_empty_and_missing_files_are_one_line(tmp_path):
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "junk.mp4").write_bytes(b"\x00\x01 not a video" * 100)
    for name in ("empty.mp4", "junk.mp4", "missing.mp4"):
        with pytest.raises(DataError) as err:
            read_frames(tmp_path / name)
        assert name in str(err.value) and "\n" not in str(err.value)


def test_frame_features_in_the_store_and_resume(tmp_path):
    from rlcap.data.features import open_feature_store

    write_clip(tmp_path / "a.mp4", frames=24)
    write_clip(tmp_path / "b.mp4", frames=12)
    (tmp_path / "bad.mp4").write_bytes(b"")
    videos = {"a": tmp_path / "a.mp4", "b": tmp_path / "b.mp4", "bad": tmp_path / "bad.mp4"}
    stats = extract_video_features(videos, tmp_path / "f.h5", image_size=96, fps=4.0, max_frames=16, on_error="skip")
    assert stats.encoded == 2 and [i for i, _ in stats.failed] == ["bad"]
    with open_feature_store(str(tmp_path / "f.h5")) as store:
        fc, att, counts = store.load_all(["a", "b"])
    assert counts.tolist() == [12, 6]  # 3 s and 1.5 s of video at 4 fps
    np.testing.assert_allclose(fc[0], att[0, :12].mean(0), atol=1e-2)
    again = extract_video_features(videos, tmp_path / "f.h5", image_size=96, fps=4.0, max_frames=16, on_error="skip")
    assert again.encoded == 0 and again.already_done == 2


def test_features_cli_on_a_folder_of_videos(tmp_path, capsys):
    from rlcap.cli import main
    from rlcap.data.features import open_feature_store

    (tmp_path / "clips").mkdir()
    write_clip(tmp_path / "clips" / "video0.mp4", frames=16)
    write_clip(tmp_path / "clips" / "video1.mp4", frames=8)
    assert main(["features", str(tmp_path / "clips"), "--out", str(tmp_path / "v.h5"), "--image-size", "96",
                 "--frames", "4"]) == 0
    assert "encoded 2 videos" in capsys.readouterr().out
    with open_feature_store(str(tmp_path / "v.h5")) as store:
        _, att, counts = store.load_all(["video0", "video1"])
    assert counts.tolist() == [4, 4] and att.shape[1] == 4


def test_video_frames_through_a_transformers_encoder(tmp_path):
    """`--encoder hf:DIR` on videos: each sampled frame's pooled vector (here a ViT's pooler output) a region."""
    pytest.importorskip("transformers")
    import torch

    from rlcap.data.features import open_feature_store
    from rlcap.encoders.load import load_encoder
    from tests.encoders.hf_models import save_tiny

    vit = save_tiny("vit", tmp_path / "vit")
    write_clip(tmp_path / "a.mp4", frames=24)
    extract_video_features({"a": tmp_path / "a.mp4"}, tmp_path / "f.h5", image_size=None, n_frames=4,
                           encoder=f"hf:{vit}")
    encoder = load_encoder(f"hf:{vit}")
    frames = read_frames(tmp_path / "a.mp4", n_frames=4)
    per_frame, _ = encoder.features(torch.from_numpy(encoder.prepare(frames)))
    with open_feature_store(str(tmp_path / "f.h5")) as store:
        fc, att, counts = store.load_all(["a"])
        assert store.attrs["encoder"] == "hf:ViTModel" and store.attrs["frames"] == "att rows are frames"
    assert counts.tolist() == [4]
    np.testing.assert_allclose(att[0].astype(np.float32), per_frame.numpy(), atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(fc[0].astype(np.float32), per_frame.numpy().mean(0), atol=2e-3, rtol=2e-3)

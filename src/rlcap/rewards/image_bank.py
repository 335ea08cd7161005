"""The image bank of the retrieval rewards: every image embedded once, and its mined neighbours.

[Chaffin24 sec. 3.4]: "the mining of similar images and the computation of all image
representations is done only once before the training". A bank is an HDF5 file:

- ``ids`` (N,) image ids, ``embeddings`` (N, D) float32 unit rows (the retriever's image side);
- ``neighbours`` (N, k) int: for each image, the rows of its k most similar *training* images by
  cosine (itself excluded), the hard negatives added to a batch's image pool;
- attributes: ``retriever`` (the path it was built with), ``kind`` (dual_encoder or clip), ``k``.

``rlcap retrieval index`` writes one (:func:`rlcap.api.build_image_bank`); the rewards load it from
``reward.paths.retrieval_bank``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from rlcap.data.loader import SplitData
from rlcap.data.readers import read_dataset
from rlcap.encoders.hf import local_folder
from rlcap.encoders.images import load_image
from rlcap.errors import DataError
from rlcap.files import write_bytes
from rlcap.models.retriever import DualEncoderRetriever, load_retriever

MINING_BLOCK = 2048  # query rows per similarity block when mining


@dataclass
class ImageBank:
    ids: list[str]
    embeddings: torch.Tensor  # (N, D)
    neighbours: torch.Tensor  # (N, k) long
    retriever: str = ""
    kind: str = ""

    def __post_init__(self) -> None:
        self.row = {image_id: k for k, image_id in enumerate(self.ids)}

    def rows(self, image_ids: list[str]) -> torch.Tensor:
        """Image ids -> (B,) bank rows; one clear error for an id the bank does not hold."""
        try:
            return torch.tensor([self.row[i] for i in image_ids], dtype=torch.long)  # cpu: the bank lives on the CPU
        except KeyError as exc:
            raise DataError(f"image {exc.args[0]!r} is not in the image bank built with {self.retriever or '?'}; "
                            "rebuild it on this dataset (rlcap retrieval index)") from None

    def pool(self, image_ids: list[str], hard_negatives: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The image pool of a batch: its distinct images, then up to ``hard_negatives`` mined
        neighbours of each (those not already in the pool). -> (M, D) embeddings and, for each
        given id, its row in the pool (B,)."""
        rows, owner = self.pool_rows(image_ids, hard_negatives)
        return self.embeddings[rows], owner

    def pool_rows(self, image_ids: list[str], hard_negatives: int) -> tuple[list[int], torch.Tensor]:
        """:meth:`pool` as bank rows: the pool's M rows (the batch's distinct images first, then
        the mined neighbours) and, for each given id, its position in the pool (B,)."""
        order = list(dict.fromkeys(image_ids))  # distinct, in order of first appearance
        rows = self.rows(order).tolist()
        seen = set(rows)
        k = min(hard_negatives, self.neighbours.size(1))
        for r in list(rows):
            for n in self.neighbours[r, :k].tolist():
                if n not in seen:
                    seen.add(n)
                    rows.append(n)
        where = {image_id: p for p, image_id in enumerate(order)}
        return rows, torch.tensor([where[i] for i in image_ids], dtype=torch.long)  # cpu: the bank lives on the CPU

    def save(self, path: str | Path) -> None:
        """The bank as an HDF5 file, written whole or not at all (:func:`rlcap.files.write_bytes`: a full
        disk or a read-only folder is one line, and no temporary file is left). HDF5 does not survive a
        write that fails for lack of space, so the file is made in memory first."""
        buffer = io.BytesIO()
        with h5py.File(buffer, "w") as f:
            f.create_dataset("ids", data=np.array(self.ids, dtype=object), dtype=h5py.string_dtype())
            f.create_dataset("embeddings", data=self.embeddings.numpy().astype(np.float32))
            f.create_dataset("neighbours", data=self.neighbours.numpy().astype(np.int64))
            f.attrs.update({"retriever": self.retriever, "kind": self.kind, "k": self.neighbours.size(1)})
        write_bytes(path, buffer.getvalue())


def load_image_bank(path: str | Path, retriever: str | Path | None = None) -> ImageBank:
    """The bank at ``path``; with ``retriever`` (the retriever the reward scores with), a bank that
    records another retriever is refused: its embeddings live in that retriever's space, and its
    neighbours are that retriever's hard negatives."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no image bank there; build one with rlcap retrieval index")
    try:
        with h5py.File(path, "r") as f:
            ids = [x.decode() if isinstance(x, bytes) else str(x) for x in f["ids"][()]]
            bank = ImageBank(ids, torch.from_numpy(f["embeddings"][()]), torch.from_numpy(f["neighbours"][()]),
                             str(f.attrs.get("retriever", "")), str(f.attrs.get("kind", "")))
    except (OSError, KeyError) as exc:
        raise DataError(f"{path}: not an image bank ({exc})") from exc
    if retriever is not None and bank.retriever and not same_retriever(bank.retriever, retriever):
        raise DataError(f"{path} was built with the retriever {bank.retriever}, not {retriever}: rebuild it "
                        f"(rlcap retrieval index {retriever} --dataset ... --out {path}) or give the bank built with "
                        f"{retriever}")
    return bank


def same_retriever(recorded: str, given: str | Path) -> bool:
    """Whether a bank's recorded retriever path names ``given``: the same text, or the same folder
    (a relative path is taken from the working directory, as when it was given; ``hf:DIR`` names DIR)."""
    return recorded == str(given) or local_folder(recorded).resolve() == local_folder(given).resolve()


def mine_neighbours(embeddings: torch.Tensor, candidates: torch.Tensor, k: int) -> torch.Tensor:
    """For each row of ``embeddings`` (N, D), the k rows among ``candidates`` (indices into the
    same N) with the highest cosine, itself excluded -> (N, k) long, most similar first."""
    if k < 0:
        raise ValueError(f"mine_neighbours: k must be >= 0, got {k}")
    k = min(k, max(len(candidates) - 1, 0))
    pool = embeddings[candidates]  # (C, D)
    out = []
    for start in range(0, embeddings.size(0), MINING_BLOCK):
        block = embeddings[start:start + MINING_BLOCK]  # (b, D)
        sim = block.float() @ pool.float().T  # (b, C), fp32: ranks
        # cpu: the bank and its mining live on the CPU
        itself = candidates[None, :] == torch.arange(start, start + block.size(0))[:, None]  # (b, C)
        sim = sim.masked_fill(itself, float("-inf"))
        # cpu: the bank and its mining live on the CPU
        out.append(candidates[sim.topk(k, dim=1).indices] if k else torch.zeros(block.size(0), 0, dtype=torch.long))
    return torch.cat(out) if out else torch.zeros(0, k, dtype=torch.long)  # cpu: the bank lives on the CPU


def build_image_bank(retriever_path: str | Path, data_cfg, images_dir: str | Path | None = None, k: int = 10,
                     batch_size: int = 256, device: str = "cpu") -> ImageBank:
    """Embed every image of a dataset (all its splits) with a retriever and mine each image's k
    nearest training images. ``data_cfg``: a :class:`rlcap.data.loader.DataConfig` (the dual encoder
    reads its feature store); ``images_dir``: the image files, for a CLIP retriever."""
    retriever = load_retriever(retriever_path, device)
    records = read_dataset(data_cfg.dataset, data_cfg.format, data_cfg.coco_splits, data_cfg.columns())
    if not records:
        raise DataError(f"{data_cfg.dataset} holds no images")
    ids = [r.id for r in records]
    if isinstance(retriever, DualEncoderRetriever):
        if not data_cfg.features:
            raise DataError(f"{retriever_path} is a dual encoder, which embeds feature vectors: give the feature "
                            "store of the dataset (--features FILE, made as its training features were)")
        split = SplitData(records, retriever.vocab, data_cfg.features, data_cfg.max_len)
        # cpu: the bank and its mining live on the CPU
        chunks = [retriever.embed_feats(split.feats(torch.arange(i, min(i + batch_size, len(ids)))))
                  for i in range(0, len(ids), batch_size)]
    else:
        if images_dir is None and any(r.image is None for r in records):  # (not all stored in a datasets dataset)
            raise DataError("a CLIP retriever embeds the image files: give their folder (--images)")
        folder = Path(images_dir or ".")
        missing = [r.id for r in records if not r.filename and r.image is None]
        if missing:
            raise DataError(f"image {missing[0]!r} has no file name in {data_cfg.dataset}")
        # a picture a datasets dataset stores in its own files is read there
        chunks = [retriever.embed_images([load_image(r.image if r.image is not None else folder / r.filename)
                                          for r in records[i:i + batch_size]])
                  for i in range(0, len(records), batch_size)]
    embeddings = torch.cat(chunks)  # (N, D)
    # cpu: the bank and its mining live on the CPU
    train = torch.tensor([k for k, r in enumerate(records) if r.split == "train"], dtype=torch.long)
    if len(train) == 0:
        raise DataError(f"{data_cfg.dataset} has no training images to mine neighbours from")
    return ImageBank(ids, embeddings, mine_neighbours(embeddings, train, k), str(retriever_path), retriever.kind)

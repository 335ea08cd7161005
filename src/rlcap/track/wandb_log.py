"""What a W&B run holds, read from its local transaction logs (``run-<id>.wandb``: the LevelDB-style log of protobuf
records that W&B's service writes, one per segment of the run, and ``wandb sync`` sends). W&B's service writes that
log in blocks: a process killed mid-run leaves the records of its last block unwritten, so a resumed run reads what
is there rather than trusting what it sent."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768      # the log's block size
HEADER = 7         # a record's header: CRC-32 (4 bytes), length (2), type (1); the file opens with one of 7 bytes
ENDS = (1, 4)      # FULL and LAST end a record (FIRST = 2 and MIDDLE = 3 continue it)


def records(path: Path) -> list[Any]:
    """The protobuf records (``wandb_internal_pb2.Record``) of one transaction log, as far as it was written."""
    from wandb.proto import wandb_internal_pb2 as pb

    raw = path.read_bytes()
    pos, out, buf = HEADER, [], b""
    while pos + HEADER <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + HEADER])
        pos += HEADER
        if kind == 0 and length == 0 or pos + length > len(raw):
            break
        buf += raw[pos:pos + length]
        pos += length
        if kind in ENDS:
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def held_steps(wandb_dir: Path, run_id: str) -> set[tuple[str, int]]:
    """(split, step) of every history row of run ``run_id`` under ``wandb_dir`` holding a ``split/...`` value."""
    held: set[tuple[str, int]] = set()
    for path in wandb_dir.glob(f"*-{run_id}/run-{run_id}.wandb"):
        for record in records(path):
            if record.WhichOneof("record_type") != "history":
                continue
            row = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            if "_step" in row:
                step = int(json.loads(row["_step"]))
                held.update((key.partition("/")[0], step) for key in row if key.count("/") == 1)
    return held

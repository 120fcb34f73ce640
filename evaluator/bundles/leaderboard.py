"""The SQuAD v1.1 leaderboard as bundle folders waiting for their program files.

The leaderboard export records, per submission, its description ("Name (Institution)"),
hidden-test EM/F1, the CodaLab ids of the submission and prediction runs and the image of
the scoring run, but not the program itself. `import_export` writes one folder per entry
with `status: awaiting-program`; `complete` turns a folder into a runnable `command` bundle
once its owner supplies the CodaLab bundle's files.
"""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import yaml

from evaluator.bundles.names import parse_name
from evaluator.bundles.spec import check_links
from evaluator.core.errors import ConfigError, UserError

PREFIX = "lb-"
EXPORT_SOURCE = "SQuAD v1.1 leaderboard export out-v1.1.json (hidden test set)"


def slug(text: str, limit: int = 40) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return text[:limit].rstrip("-") or "unnamed"


def _ids(entry: dict) -> dict:
    meta = entry["bundle"]["metadata"]
    try:
        ids = json.loads(meta.get("description") or "{}")
    except json.JSONDecodeError:
        ids = {}
    return {
        "submit_id": ids.get("submit_id"), "predict_id": ids.get("predict_id"),
        "submitter_id": ids.get("submitter_id"), "eval_bundle": entry["bundle"]["id"],
        "eval_bundle_name": meta.get("name"), "eval_image": meta.get("docker_image"),
        "user_name": entry["submission"].get("user_name"),
    }


def folder_spec(entry: dict) -> dict:
    """The bundle.yaml content for one leaderboard entry."""
    description = (entry["submission"].get("description") or "").strip()
    ids = _ids(entry)
    if not description:
        match = re.match(r"^[^-]+-predictions-(.+)-results$", ids["eval_bundle_name"] or "")
        description = match.group(1) if match else ids["eval_bundle_name"] or "unnamed"
    parsed = parse_name(description, trailing_institution=True)
    name = parsed.name + (f" ({parsed.kind_label})" if parsed.kind_label else "")
    link = re.search(r"(https?://\S+)\s*$", description)
    created = entry["submission"].get("created")
    scores = entry["scores"]
    key = (ids["submit_id"] or ids["eval_bundle"])[2:8]
    spec = {
        "id": f"{PREFIX}{slug(name)}-{key}",
        "name": name,
        "kind": "command",
        "status": "awaiting-program",
        "resources": {"gpus": 0, "cpus": 1, "memory": "8g", "timeout": 7200},
        "network": False,
        "reference_scores": {},
        "metadata": {
            "institution": parsed.institution,
            "description": description,
            "date": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%d")
            if created else None,
            "link": link.group(1) if link else None,
            "origin": "SQuAD v1.1 leaderboard export (out-v1.1.json)",
        },
        "codalab": ids,
    }
    if scores.get("f1") is not None:
        spec["reference_scores"] = {"testset": "squad-test", "em": scores["exact_match"],
                                    "f1": scores["f1"], "source": EXPORT_SOURCE}
    return spec


def import_export(export: Path, root: Path, overwrite: bool = False) -> tuple[int, int]:
    """Write a folder per leaderboard entry; returns (written, kept as they were)."""
    entries = json.loads(export.read_text())["leaderboard"]
    written = kept = 0
    seen: set[str] = set()
    for entry in entries:
        spec = folder_spec(entry)
        if spec["id"] in seen:
            raise ConfigError(f"two leaderboard entries map to the folder {spec['id']}")
        seen.add(spec["id"])
        folder = root / spec["id"]
        target = folder / "bundle.yaml"
        if target.exists() and not overwrite:
            kept += 1
            continue
        folder.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
        written += 1
    return written, kept


def complete(folder: Path, program: Path, command: str, *, image: str | None = None,
             dockerfile: str | None = None, requirements: str | None = None) -> dict:
    """Copy the owner's CodaLab bundle files in and make the folder a runnable bundle."""
    target = folder / "bundle.yaml"
    if not target.exists():
        raise UserError(f"no bundle folder at {folder}")
    if not program.is_dir():
        raise UserError(f"{program} is not a directory holding the submission's files")
    if "{input}" not in command or "{output}" not in command:
        raise UserError("the command must contain {input} and {output} where the test file "
                        "and predictions file go, e.g. 'python predict.py {input} {output}'")
    if image and "@sha256:" not in image and not image.startswith("sha256:"):
        raise UserError(f"pin the image by digest (name@sha256:...), got {image!r}")
    check_links(program)  # a link to gold answers or host files is refused, never copied
    spec = yaml.safe_load(target.read_text())
    for item in program.iterdir():
        if item.name == "bundle.yaml":
            continue
        dest = folder / item.name
        if item.is_dir() and not item.is_symlink():
            shutil.copytree(item, dest, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dest, follow_symlinks=False)
    environment = {}
    if image:
        environment["image"] = image
    if dockerfile:
        if not (folder / dockerfile).is_file():
            raise UserError(f"{dockerfile} is not among the submission's files")
        environment["build"] = dockerfile
    if requirements:
        if not (folder / requirements).is_file():
            raise UserError(f"{requirements} is not among the submission's files")
        environment["requirements"] = requirements
    spec.update({"status": "ready", "command": command, "environment": environment})
    target.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return spec


def lacks(spec_status: str, command: str | None, environment: dict) -> str:
    """What a bundle still needs before it can run, in a few words ('' when nothing)."""
    if spec_status == "awaiting-program":
        return "program files, command, environment (qashift bundles complete)"
    missing = []
    if not command:
        missing.append("command")
    return ", ".join(missing)

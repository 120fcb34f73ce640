"""A bundle folder's YAML is parsed once per content, also across processes (`-b all` reads
hundreds of them at every start): later processes read the mapping kept under the cache by
the file's sha256; a file JSON cannot hold exactly (a YAML date) is parsed every time."""

from __future__ import annotations

import json

from evaluator.bundles import spec as bundles
from evaluator.core import folders
from evaluator.core.hashing import sha256_bytes

BUNDLE = "id: kept\nname: Kept\nkind: command\ncommand: python3 p.py {input} {output}\n"


def kept(tmp_path, text: str):
    folder = tmp_path / "subs" / "kept"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bundle.yaml").write_text(text)
    (folder / "p.py").write_text("")
    return folder, tmp_path / "cache" / "parsed-yaml" / (digest := sha256_bytes(
        text.encode()))[:2] / f"{digest}.json"


def test_a_later_process_reads_the_mapping_kept_for_the_same_bytes(tmp_path, workspace):
    folder, copy = kept(tmp_path, BUNDLE)
    assert bundles.from_folder(folder).name == "Kept" and copy.is_file()
    assert json.loads(copy.read_bytes())["name"] == "Kept"
    # a later process (no parse in memory) takes the kept mapping for these bytes, unread
    copy.write_text(json.dumps({**json.loads(copy.read_bytes()), "name": "Read from the cache"}))
    folders._PARSED.clear()
    assert bundles.from_folder(folder).name == "Read from the cache"
    # other bytes are other content: parsed again
    folder, _ = kept(tmp_path, BUNDLE.replace("Kept", "Changed"))
    folders._PARSED.clear()
    assert bundles.from_folder(folder).name == "Changed"


def test_a_file_json_cannot_hold_is_parsed_every_time(tmp_path, workspace):
    folder, copy = kept(tmp_path, BUNDLE + "metadata: {date: 2018-10-05}\n")
    folders._PARSED.clear()
    assert str(bundles.from_folder(folder).metadata["date"]) == "2018-10-05"
    assert not copy.exists()

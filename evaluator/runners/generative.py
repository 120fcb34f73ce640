"""The generative runner: a generative bundle answers each question in generated text, from a
local Transformers model (`model:`) or an OpenAI-compatible server (`endpoint:`).

Bundle fields (bundle.yaml, kind generative):
  model: {path | cache | hub}    a causal or sequence-to-sequence model, as for hf-qa
  endpoint: {url, model, api: completions | chat, api_key_env, concurrency, timeout, retries}
  prompt: {template, shots, shots_from, seed, separator, instruction}
  generation: {max_new_tokens, stop, extraction: first-line | raw, batch_size}

The controller draws the demonstrations (from the training split `shots_from`, never the test
set) and writes them with the prompt and decoding settings to one config file; a local model
runs `python -m evaluator.qa --generative CONFIG` in a child process with the bundle's limits
(the Docker runner runs the same program in its container). Besides `predictions.json` the
output folder gets `generations.json`: each question's generated text and extracted answer,
stored with the run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure
from evaluator.core.files import run_tempdir
from evaluator.data import testsets
from evaluator.qa import prompting
from evaluator.qa.predict import NoCUDA, pick_device
from evaluator.runners import endpoint as endpoints
from evaluator.runners import hfqa, interrupts
from evaluator.runners.base import (
    GENERATIONS_FILE,
    RunRecord,
    RunRequest,
    classify,
)
from evaluator.runners.limits import cancel_all

CONFIG_FILE = "generative.json"


def program_config(bundle: Bundle) -> dict:
    """What the generative program reads: the prompt, its demonstrations, the decoding."""
    prompt = bundle.generative["prompt"]
    demos = []
    if prompt["shots"]:
        train = testsets.get(prompt["shots_from"])
        if train.kind != "training":
            raise RunFailure("not-applicable", f"{bundle.id}: prompt.shots_from names "
                             f"{train.id!r}, which is not a training split")
        demos = prompting.demonstrations(train.load().raw, prompt["shots"], prompt["seed"])
    return {"prompt": prompt, "generation": bundle.generative["generation"],
            "demonstrations": [d.__dict__ for d in demos]}


class GenerativeRunner:
    """Runs generative bundles: a local model in a child process, or an endpoint."""

    name = "generative"

    def __init__(self, progress: bool = True):
        self.progress = progress
        interrupts.on_interrupt(cancel_all)

    def run(self, request: RunRequest) -> RunRecord:
        config = program_config(request.bundle)
        if "endpoint" in request.bundle.generative:
            return self._ask_endpoint(request, config)
        return self._run_child(request, config)

    def _ask_endpoint(self, request: RunRequest, config: dict) -> RunRecord:
        bundle, started = request.bundle, time.perf_counter()
        ref = bundle.generative["endpoint"]
        raw = json.loads(request.input_path.read_text(encoding="utf-8"))
        items = prompting.prompted(raw, config)
        spec = prompting.generation_spec(config)
        server = endpoints.Endpoint(ref, bundle.id, time_limit=bundle.timeout)
        answers, generations = prompting.answers(
            endpoints.ask_all(server, items, spec, progress=self.progress), spec)
        request.output_path.write_text(json.dumps(answers, ensure_ascii=False))
        (request.output_dir / GENERATIONS_FILE).write_text(
            json.dumps(generations, ensure_ascii=False))
        return RunRecord(runner="endpoint", wall_s=time.perf_counter() - started, exit_code=0,
                         device="remote",
                         details={"endpoint": {"url": ref["url"], "model": ref["model"],
                                               "api": ref["api"]},
                                  "requests_sent": server.sent, "questions": len(items),
                                  "isolated": True})

    def _run_child(self, request: RunRequest, config: dict) -> RunRecord:
        bundle = request.bundle
        spec = hfqa.model_spec(bundle)
        hfqa.check_model(spec, bundle)
        try:
            device = pick_device(request.device)
        except NoCUDA as exc:
            raise RunFailure("no-gpu-kernel", str(exc)) from None
        with run_tempdir("generative") as tmp:
            config_path, record_path = Path(tmp) / CONFIG_FILE, Path(tmp) / "record.json"
            config_path.write_text(json.dumps(config))
            argv = [sys.executable, "-m", "evaluator.qa", "--generative", str(config_path),
                    "--model", str(spec.directory), "--input", str(request.input_path),
                    "--output", str(request.output_path), "--generations",
                    str(request.output_dir / GENERATIONS_FILE), "--record", str(record_path),
                    "--device", "cuda" if device.startswith("cuda") else "cpu"]
            ended, wall, details = hfqa.run_program(argv, tmp, bundle, request.cpus,
                                                    record_path)
        ended.produced = request.output_path.is_file()
        classify(bundle.id, ended)
        return RunRecord(runner=self.name, wall_s=wall, exit_code=0, log=ended.log,
                         peak_memory_bytes=ended.peak_memory,
                         device="gpu" if device.startswith("cuda") else "cpu",
                         details={**details, "isolated": False}, cpu_s=ended.cpu_s)

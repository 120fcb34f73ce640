"""What the generative tests share: a tiny causal language model, a generative bundle folder,
and a real OpenAI-compatible server (`transformers serve`) on the loopback address whose
access log counts the requests it answered."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import add_model_store
from tests.tiny_bert import make_tiny_causal_lm, squad_texts

SERVE_START_S = 120


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory, dev_raw) -> Path:
    pytest.importorskip("transformers")
    folder = make_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm") / "model",
                                 squad_texts({"data": dev_raw["data"][:2]}))
    add_model_store(folder.parent)  # bundles name it by absolute path
    return folder


class Server:
    """A running `transformers serve` process serving one model folder."""

    def __init__(self, model: Path, log: Path):
        self.model, self.log = model, log
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            ["transformers", "serve", str(model), "--host", "127.0.0.1", "--port",
             str(self.port), "--device", "cpu"], stdout=log.open("w"),
            stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + SERVE_START_S
        while True:
            assert self.proc.poll() is None, log.read_text()[-2000:]
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "transformers serve did not start"
            time.sleep(0.5)

    def completions_answered(self) -> int:
        """POSTs to /v1/completions the server logged as answered (200)."""
        return sum('"POST /v1/completions HTTP/1.1" 200' in line
                   for line in self.log.read_text().splitlines())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def served(tiny_lm, tmp_path_factory) -> Server:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    server = Server(tiny_lm, tmp_path_factory.mktemp("serve") / "access.log")
    yield server
    server.stop()


def write_generative_bundle(root: Path, bundle_id: str, *, model: Path | None = None,
                            endpoint: str | None = None, extra: str = "",
                            generation: str = "{max_new_tokens: 6, stop: []}") -> Path:
    """A generative bundle folder: a local model, or an endpoint (`endpoint:` YAML body)."""
    folder = root / bundle_id
    folder.mkdir(parents=True)
    source = f"model: {{path: {model}}}\n" if model else f"endpoint: {endpoint}\n"
    (folder / "bundle.yaml").write_text(
        f"id: {bundle_id}\nname: {bundle_id}\nkind: generative\n{source}"
        f"generation: {generation}\nresources: {{timeout: 300}}\n{extra}")
    return folder


def write_served_twin(root: Path, bundle_id: str, server: Server, approach: Path) -> Path:
    """A bundle asking `server` with an approach's own prompt and decoding (its bundle.yaml's
    `prompt:` and `generation:`): the served twin of that approach's systems."""
    text = (approach / "bundle.yaml").read_text()
    generation = text.split("generation: ")[1].splitlines()[0]
    prompt = text.split("prompt:\n")[1].split("\n")[0]
    return write_generative_bundle(
        root, bundle_id, generation=generation,
        endpoint=f"{{url: '{server.url}', model: '{server.model}', concurrency: 1}}",
        extra=f"prompt:\n{prompt}\n")


class Misbehaving:
    """A server on the loopback address that answers every POST with `status` and `body`
    (a real HTTP server behaving badly), noting each request's Authorization header."""

    def __init__(self, status: int, body: bytes):
        import http.server
        import threading

        outer = self
        self.authorizations: list[str | None] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.authorizations.append(self.headers.get("Authorization"))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

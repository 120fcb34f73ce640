"""What the generative tests share: a tiny causal language model, a generative bundle folder,
a real OpenAI-compatible server (`transformers serve`) on the loopback address whose access
log counts the requests it answered, small real HTTP servers that answer as a test scripts
them, and the operator's policy that lets an endpoint be on the loopback address at all."""

from __future__ import annotations

import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
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
        self.origin = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.origin}/v1"
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
                            generation: str = "{max_new_tokens: 6, stop: []}",
                            resources: str = "{timeout: 300}") -> Path:
    """A generative bundle folder: a local model, or an endpoint (`endpoint:` YAML body)."""
    folder = root / bundle_id
    folder.mkdir(parents=True)
    source = f"model: {{path: {model}}}\n" if model else f"endpoint: {endpoint}\n"
    (folder / "bundle.yaml").write_text(
        f"id: {bundle_id}\nname: {bundle_id}\nkind: generative\n{source}"
        f"generation: {generation}\nresources: {resources}\n{extra}")
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


class Loopback:
    """A real HTTP server on a loopback address whose every request `answer` replies to; it
    notes each request's path and Authorization header and the most requests in flight at
    once. `host` "::1" serves on the IPv6 loopback address; `tls` (a certificate and its
    key, PEM files) serves https."""

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None],
                 host: str = "127.0.0.1", tls: tuple[Path, Path] | None = None):
        outer = self
        self.paths: list[str] = []
        self.authorizations: list[str | None] = []
        self.in_flight = self.most_in_flight = 0
        self.closed = threading.Event()
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    outer.paths.append(self.path)
                    outer.authorizations.append(self.headers.get("Authorization"))
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                try:
                    answer(self)
                except OSError:  # the client went away
                    pass
                finally:
                    with lock:
                        outer.in_flight -= 1

            do_GET = do_POST  # noqa: N815 - the stdlib's name

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        self.httpd = Server((host, 0), Handler)
        self.httpd.closing = self.closed  # a slow answer stops when the server closes
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*map(str, tls))
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        scheme = "https" if tls else "http"
        self.origin = f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"
        self.url = f"{self.origin}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def requests(self) -> int:
        return len(self.paths)

    def close(self) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(status: int, body: bytes, headers: dict | None = None):
    """An answer: `status`, then `body` at once."""
    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return answer


def completion(text: str) -> bytes:
    return json.dumps({"choices": [{"text": text}]}).encode()


class Misbehaving(Loopback):
    """A server on the loopback address that answers every POST with `status` and `body`
    (a real HTTP server behaving badly)."""

    def __init__(self, status: int, body: bytes):
        super().__init__(reply(status, body))


def allow_endpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *origins: str,
                    keys: dict[str, str] | None = None, ca_bundle: Path | None = None) -> Path:
    """The operator's policy ($QASHIFT_POLICY) lets endpoints be at `origins`, grants each
    key variable in `keys` to its URL prefix, and checks https servers against `ca_bundle`."""
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps({"endpoint_origins": list(origins),
                                "endpoint_keys": dict(keys or {})}
                               | ({"endpoint_ca_bundle": str(ca_bundle)} if ca_bundle else {}))
                    + "\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(path))
    return path

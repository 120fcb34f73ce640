"""A generative bundle's endpoint is a door to the operator's network and time: it reaches
only where the operator allows (no loopback or private address by any spelling, no redirect,
nothing of the controller's environment), a key goes only under its grant, a failure line
keeps nothing of the reply, and every endpoint cell stops: at its request and cell time
limits, on SIGTERM or Ctrl-C, with at most `concurrency` questions in flight. Every server
here is a real HTTP server on the loopback address."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.bundles import policy
from evaluator.cli.main import evaluate_cmd
from evaluator.core.errors import ConfigError, RunFailure
from evaluator.qa.prompting import GenerationSpec, Prompted
from evaluator.runners import endpoint as endpoints
from tests.conftest import hears_ctrl_c, tiny_registry
from tests.support.generative import (
    Loopback,
    allow_endpoints,
    completion,
    reply,
    write_generative_bundle,
)

SECRET = b"INTERNAL-ADMIN-TOKEN=5f3a9c; db=postgres://admin:pw@10.0.0.5/prod"


@pytest.fixture
def subs(tmp_path, monkeypatch, workspace, dev_raw) -> Path:
    """Test sets 'one' (a single question) and 'many' (every question of SQuAD dev's first
    article), and an empty submissions root."""
    article = dev_raw["data"][0]
    paragraph = dict(article["paragraphs"][0], qas=article["paragraphs"][0]["qas"][:1])
    one = {"version": "1.1", "data": [{"title": article["title"], "paragraphs": [paragraph]}]}
    many = {"version": "1.1", "data": [article]}
    return tiny_registry(tmp_path, monkeypatch, {"one": one, "many": many}, {})[1]


@pytest.fixture
def servers():
    """Loopback servers started by a test, closed after it."""
    started: list[Loopback] = []

    def start(answer, host: str = "127.0.0.1", tls: tuple[Path, Path] | None = None
              ) -> Loopback:
        started.append(Loopback(answer, host, tls))
        return started[-1]

    yield start
    for server in started:
        server.close()


def ask(subs: Path, url: str, extra: str = "", resources: str = "{timeout: 300}",
        testset: str = "one", bundle: str = "ep") -> tuple[int, dict]:
    """Evaluate a bundle whose endpoint is `url` on `testset`: (exit code, --json)."""
    write_generative_bundle(subs, bundle, resources=resources,
                            endpoint=f"{{url: '{url}', model: m, concurrency: 1{extra}}}")
    result = CliRunner().invoke(evaluate_cmd, ["-b", bundle, "-t", testset, "--runner",
                                               "local", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def failure_of(doc: dict) -> dict:
    [failure] = doc["failed"]
    assert "\n" not in failure["message"] and len(failure["message"]) < 500, failure
    return failure


def nothing_kept_of(workspace: Path, marker: bytes) -> None:
    """`marker` is in no file of the workspace (the store, its objects, logs, responses)."""
    for path in workspace.rglob("*"):
        if path.is_file():
            assert marker not in path.read_bytes(), path


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("host", [
    "127.0.0.1", "127.1", "0x7f000001", "2130706433", "0.0.0.0", "localhost",
    pytest.param("[::1]", marks=pytest.mark.skipif(not ipv6_loopback(), reason="no ::1")),
    "[::ffff:127.0.0.1]"])
def test_an_endpoint_reaches_no_loopback_address_by_any_spelling(subs, servers, workspace,
                                                                 host):
    """The address is checked after resolution, where the connection is made: the
    loopback service's reply (here its secrets) is never asked for."""
    service = servers(reply(500, SECRET), host="::1" if host == "[::1]" else "127.0.0.1")
    _, doc = ask(subs, f"http://{host}:{service.port}/v1", ", retries: 0")
    failure = failure_of(doc)
    assert failure["failure_class"] == "endpoint-refused", failure
    assert "not a public address" in failure["message"]
    assert service.requests == 0
    nothing_kept_of(workspace, b"INTERNAL-ADMIN-TOKEN")


@pytest.mark.parametrize("address", [
    "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "224.0.0.1",
    "255.255.255.255", "0.0.0.0", "::", "::1", "fe80::1", "fc00::1", "ff02::1",
    "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "2001:db8::1", "fec0::1"])
def test_no_private_link_local_multicast_or_reserved_address_is_public(address):
    assert endpoints.refused_address(address)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::6810:85e5"])
def test_a_public_address_is_public(address):
    assert endpoints.refused_address(address) is None


def test_an_origin_the_operator_lists_is_reached_and_only_it(subs, servers, tmp_path,
                                                           monkeypatch):
    service = servers(reply(200, completion(" Denver\n")))
    allow_endpoints(tmp_path, monkeypatch, f"http://127.0.0.1:{service.port}")
    code, doc = ask(subs, service.url)
    assert code == 0, doc
    assert service.requests == 1
    _, doc = ask(subs, f"http://127.1:{service.port}/v1", bundle="spelt")  # not listed
    assert failure_of(doc)["failure_class"] == "endpoint-refused"
    assert service.requests == 1


@pytest.mark.parametrize("given, problem", [
    ("'http://a.example'", "endpoint_origins must be a list of origins"),
    ("['ftp://a.example']", "'ftp://a.example' is not an http(s) origin"),
    ("['http://a.example/v1']", "'http://a.example/v1' is not an http(s) origin"),
    ("['http://user@a.example']", "is not an http(s) origin"),
    ("['http://a.example:0']", "is not an http(s) origin"),
    ("['http://a.example?x=1']", "is not an http(s) origin")])
def test_a_bad_endpoint_origin_in_the_policy_is_one_line(tmp_path, monkeypatch, given, problem):
    (tmp_path / "policy.yaml").write_text(f"endpoint_origins: {given}\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(tmp_path / "policy.yaml"))
    with pytest.raises(ConfigError, match=r"policy.yaml: endpoint_origins") as caught:
        policy.current()
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_a_redirect_is_not_followed(subs, servers, tmp_path, monkeypatch, workspace):
    """A 307 from the bundle's own (allowed) server would carry the POST to a service the
    operator did not list."""
    inside = servers(reply(200, completion(" " + SECRET.decode())))
    front = servers(reply(307, b"", {"Location": f"{inside.url}/completions"}))
    allow_endpoints(tmp_path, monkeypatch, front.origin)
    _, doc = ask(subs, front.url)
    failure = failure_of(doc)
    assert failure["failure_class"] == "endpoint-error", failure
    assert "HTTP 307" in failure["message"] and "redirect" in failure["message"]
    assert str(inside.port) not in failure["message"]  # the Location is reply bytes too
    assert inside.requests == 0 and front.requests == 1
    nothing_kept_of(workspace, b"INTERNAL-ADMIN-TOKEN")


@pytest.mark.parametrize("path", [
    "/v1/../private", "/v1/./../private", "/v1/%2e%2e/private", "/v1/%2E./private",
    "/v1/..%2fprivate", "/v1%2F..%2Fprivate", "/v1/..%5cprivate", "/v1/..\\private",
    "/v1/..;/private"])
def test_a_key_goes_nowhere_past_its_prefix(subs, servers, tmp_path, monkeypatch, path):
    """The key check and the request read one normalised URL; a path the two could read
    apart (dot segments, encoded separators, backslashes, `;`) is refused outright."""
    monkeypatch.setenv("QASHIFT_TEST_SECRET", "operator-secret")
    service = servers(reply(200, completion(" Denver\n")))
    allow_endpoints(tmp_path, monkeypatch, service.origin,
                    keys={"QASHIFT_TEST_SECRET": service.url})
    assert not policy.current().key_allowed("QASHIFT_TEST_SECRET",
                                            f"{service.origin}{path}/completions")
    write_generative_bundle(subs, "ep", endpoint=f"{{url: '{service.origin + path}', model: m, "
                                                 f"api_key_env: QASHIFT_TEST_SECRET}}")
    result = CliRunner().invoke(evaluate_cmd, ["-b", "ep", "-t", "one", "--runner", "local"])
    assert result.exit_code != 0
    [line] = result.output.strip().splitlines()
    assert "endpoint.url" in line and "path" in line, line  # refused when the bundle is read
    with pytest.raises(RunFailure, match="path") as refused:  # and again before a request
        endpoints.Endpoint({"url": service.origin + path, "api": "completions", "model": "m",
                            "timeout": 5, "retries": 0, "concurrency": 1}, "ep",
                           tmp_path / "cache")
    assert refused.value.failure_class == "endpoint-refused"
    assert service.requests == 0


def test_the_controllers_netrc_and_proxies_are_not_used(subs, servers, tmp_path, monkeypatch):
    """Without a key grant no credential goes out: not the operator's netrc entry for the
    host, and no request goes through a proxy the environment names."""
    service = servers(reply(200, completion(" Denver\n")))
    proxy = servers(reply(200, completion(" proxied\n")))
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine 127.0.0.1 login operator password hunter2\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.origin)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    code, doc = ask(subs, service.url)
    assert code == 0, doc
    assert service.authorizations == [None]
    assert proxy.requests == 0


def drip(headers_too: bool, every_s: float = 0.2):
    """An answer sent a byte at a time: each read gets something, the whole takes ~40 s."""
    def answer(handler) -> None:
        body = completion(" Denver" + " " * 200)
        head = (f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if not headers_too:
            handler.wfile.write(head)
            handler.wfile.flush()
        for byte in (head if headers_too else b"") + body:
            if handler.server.closing.is_set():
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(every_s)
    return answer


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_dripping_server_does_not_outlive_the_request_timeout(subs, servers, tmp_path,
                                                                monkeypatch, headers_too):
    service = servers(drip(headers_too))
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    start = time.monotonic()
    _, doc = ask(subs, service.url, ", timeout: 2, retries: 0")
    assert time.monotonic() - start < 10
    failure = failure_of(doc)
    assert failure["failure_class"] == "endpoint-unreachable", failure
    assert "no complete answer within 2 s" in failure["message"]


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by openssl."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_a_dripping_https_server_does_not_outlive_the_request_timeout(subs, servers, tmp_path,
                                                                      monkeypatch):
    """Over TLS too: the watch cuts the connection, not a socket TLS has taken over, and
    the operator's CA bundle (never the environment's) checks the server."""
    cert, key = self_signed(tmp_path)
    service = servers(drip(False), tls=(cert, key))
    allow_endpoints(tmp_path, monkeypatch, service.origin, ca_bundle=cert)
    start = time.monotonic()
    _, doc = ask(subs, service.url, ", timeout: 2, retries: 0", resources="{timeout: 60}")
    assert time.monotonic() - start < 10
    failure = failure_of(doc)
    assert failure["failure_class"] == "endpoint-unreachable", failure
    assert "no complete answer within 2 s" in failure["message"]
    assert service.requests == 1  # the TLS handshake passed: the request was read


def test_retries_and_retry_after_end_at_the_cells_time_limit(subs, servers, tmp_path,
                                                             monkeypatch):
    """A wait that would pass `resources.timeout` fails the cell at once as a timeout."""
    service = servers(reply(429, b"{}", {"Retry-After": "30"}))
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    start = time.monotonic()
    _, doc = ask(subs, service.url, ", retries: 10", resources="{timeout: 3}")
    assert time.monotonic() - start < 10
    failure = failure_of(doc)
    assert failure["failure_class"] == "timeout", failure
    assert "3 s" in failure["message"]
    assert service.requests == 1


def test_a_slow_endpoint_cell_ends_at_its_time_limit(subs, servers, tmp_path, monkeypatch):
    """Each request within its own timeout, the cell's questions together past
    `resources.timeout`: stopped there, the request in flight included."""
    service = servers(hold(1.5))
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    start = time.monotonic()
    _, doc = ask(subs, service.url, ", timeout: 60", resources="{timeout: 4}",
                 testset="many")
    assert time.monotonic() - start < 10
    failure = failure_of(doc)
    assert failure["failure_class"] == "timeout", failure
    assert service.requests <= 3


def hold(seconds: float):
    """An answer given after `seconds` (or never, once the server closes)."""
    def answer(handler) -> None:
        if handler.server.closing.wait(seconds):
            return
        reply(200, completion(" Denver\n"))(handler)
    return answer


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_ends_an_endpoint_cell_within_seconds(tmp_path, monkeypatch, workspace,
                                                       dev_raw, servers, signum):
    """The real command against a server that holds every request for a minute: it ends
    within a few seconds and asks nothing after the signal."""
    first = dev_raw["data"][0]
    subs = tiny_registry(tmp_path, monkeypatch, {"many": {"version": "1.1", "data": [first]}},
                         {})[1]
    service = servers(hold(60))
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    write_generative_bundle(subs, "slow", endpoint=f"{{url: '{service.url}', model: m, "
                                                   f"concurrency: 4, timeout: 120}}")
    proc = subprocess.Popen([sys.executable, "-m", "evaluator", "evaluate", "-b", "slow", "-t",
                             "many", "--runner", "local", "--json"], env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=hears_ctrl_c)  # as a terminal's foreground command
    try:
        deadline = time.monotonic() + 90
        while service.in_flight < 4:
            assert proc.poll() is None and time.monotonic() < deadline, "no request came"
            time.sleep(0.05)
        proc.send_signal(signum)
        start = time.monotonic()
        proc.wait(timeout=30)
        elapsed = time.monotonic() - start
        asked = service.requests
        time.sleep(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert elapsed < 5, elapsed
    assert service.requests == asked == 4  # nothing asked after the signal
    assert proc.returncode == -signum, proc.stderr.read()


class Questions(Sequence):
    """`n` prompted questions, each made only when read; `taken` counts those read."""

    def __init__(self, n: int):
        self.n, self.taken = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if not 0 <= index < self.n:
            raise IndexError(index)
        self.taken += 1
        return Prompted(id=f"q{index}", prompt=f"Question {index}?")


def test_a_million_question_set_keeps_at_most_concurrency_in_flight(servers, tmp_path,
                                                                    monkeypatch, workspace):
    """No question is queued ahead of the `concurrency` being asked: a million-question
    set costs no more memory than a small one."""
    answered = threading.Semaphore(0)

    def answer(handler) -> None:
        time.sleep(0.01)
        reply(200, completion(" Denver\n"))(handler)
        answered.release()

    service = servers(answer)
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    ref = {"url": service.url, "model": "m", "api": "completions", "api_key_env": None,
           "concurrency": 4, "timeout": 10, "retries": 0}
    server = endpoints.Endpoint(ref, "million", cache=tmp_path / "responses")
    questions = Questions(1_000_000)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            endpoints.ask_all(server, questions, GenerationSpec(), progress=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    for _ in range(40):
        assert answered.acquire(timeout=30), "the endpoint stopped being asked"
    assert questions.taken <= service.requests + 4  # nothing queued ahead
    server.stop()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert service.most_in_flight <= 4
    assert questions.taken <= service.requests + 4
    assert outcome and isinstance(outcome[0], KeyboardInterrupt)


BAD_REPLIES = {
    "nested": b"[" * 1_000_000,
    "not-utf-8": b'{"choices": [{"text": "LEAK-MARKER \xff\xfe"}]}',
    "utf-16": '{"choices": [{"text": "LEAK-MARKER"}]}'.encode("utf-16"),
    "lone-surrogate": b'{"choices": [{"text": "LEAK-MARKER \\ud800"}]}',
    "nan": b'{"choices": [{"text": "LEAK-MARKER"}], "usage": {"total_tokens": NaN}}',
    "infinity": b'{"choices": [{"text": "LEAK-MARKER", "logprobs": -Infinity}]}',
    "not-json": b"LEAK-MARKER " + SECRET,
    "no-text": b'{"choices": [{"text": ["LEAK-MARKER"]}]}',
}


@pytest.mark.parametrize("name", list(BAD_REPLIES))
def test_a_bad_reply_is_a_one_line_endpoint_error(subs, servers, tmp_path, monkeypatch,
                                                  workspace, name):
    service = servers(reply(200, BAD_REPLIES[name]))
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    _, doc = ask(subs, service.url)
    failure = failure_of(doc)
    assert failure["failure_class"] == "endpoint-error", failure
    assert f"HTTP 200, {len(BAD_REPLIES[name]):,} bytes" in failure["message"]
    assert "LEAK-MARKER" not in failure["message"]
    nothing_kept_of(workspace, b"LEAK-MARKER")


@pytest.mark.parametrize("status", [404, 500])
def test_a_failure_line_names_the_status_and_size_never_the_body(subs, servers, tmp_path,
                                                                 monkeypatch, workspace,
                                                                 status):
    body = json.dumps({"error": {"message": SECRET.decode()}}).encode()
    service = servers(reply(status, body))
    allow_endpoints(tmp_path, monkeypatch, service.origin)
    _, doc = ask(subs, service.url, ", retries: 1")
    failure = failure_of(doc)
    assert failure["failure_class"] == ("endpoint-refused" if status == 404
                                        else "endpoint-error")
    assert f"HTTP {status}" in failure["message"]
    assert f"{len(body):,} bytes" in failure["message"]
    assert "INTERNAL-ADMIN-TOKEN" not in failure["message"]
    nothing_kept_of(workspace, b"INTERNAL-ADMIN-TOKEN")

"""Downloads: retried with back-off, resumed with a Range request where the last attempt
stopped (also after a kill), verified by sha256 before the file takes its name; a permanent
HTTP error or no name resolution fails at once, in one line."""

from __future__ import annotations

import hashlib
import http.server
import threading

import pytest

from evaluator.core.errors import DataError
from evaluator.data import fetch

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class Flaky(http.server.BaseHTTPRequestHandler):
    """Sends half the file and hangs up on the first request; honours Range afterwards."""

    requests: list = []

    def do_GET(self):  # noqa: N802 (the http.server interface)
        Flaky.requests.append(self.headers.get("Range"))
        if self.path != "/data.bin":
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        body = PAYLOAD[start:]
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if len(Flaky.requests) == 1:
            self.wfile.write(body[: len(body) // 2])  # then the connection drops
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.0)
    Flaky.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_an_interrupted_download_resumes_where_it_stopped(server, workspace):
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    path = fetch.fetch(fetch.Source("data.bin", sha, f"{server}/data.bin"), "test file", [])
    assert path.read_bytes() == PAYLOAD and path == fetch.cached_path(sha)
    assert Flaky.requests == [None, f"bytes={len(PAYLOAD) // 2}-"]
    assert not path.with_name(path.name + ".part").exists()


def test_a_file_with_the_wrong_hash_never_takes_its_name(server, workspace):
    source = fetch.Source("data.bin", "0" * 64, f"{server}/data.bin")
    with pytest.raises(DataError, match="sha256 mismatch"):
        fetch.fetch(source, "test file", [])
    assert not fetch.cached_path("0" * 64).exists()
    assert not fetch.cached_path("0" * 64).with_name("0" * 64 + ".part").exists()


def test_a_missing_file_is_not_retried(server, workspace):
    with pytest.raises(DataError, match="cannot download .*Not Found"):
        fetch.fetch(fetch.Source("gone.bin", "1" * 64, f"{server}/gone.bin"), "test file", [])
    assert Flaky.requests == [None]


def test_no_name_resolution_fails_at_once(workspace, monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_S", 60.0)  # a retry would make this test hang
    with pytest.raises(DataError, match="if offline, place x.json in a mirror"):
        fetch.fetch(fetch.Source("x.json", "2" * 64, "http://no-such-host.invalid/x.json"),
                    "test file", [])


def test_a_download_stops_at_the_size_it_may_have_and_keeps_no_part(server, workspace):
    """A source that sends more than its `size` (or, without one, the caller's cap: a
    predictions file's 512 MiB) is cut off there rather than filling the disk."""
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    with pytest.raises(DataError, match=r"sends more than the 1,000 bytes the file may have"):
        fetch.fetch(fetch.Source("data.bin", sha, f"{server}/data.bin", size=1000), "test file",
                    [])
    with pytest.raises(DataError, match=r"sends more than the 4,096 bytes"):
        fetch.fetch(fetch.Source("data.bin", sha, f"{server}/data.bin"), "test file", [],
                    cap=4096)
    assert not list(fetch.cached_path(sha).parent.glob("*"))  # nor a .part to resume


@pytest.mark.parametrize("url", ["file:///dev/zero", "ftp://127.0.0.1/data.bin"])
def test_only_http_addresses_are_downloaded(workspace, url):
    with pytest.raises(DataError, match=r"is not an http:// or https:// address"):
        fetch.fetch(fetch.Source("data.bin", "0" * 64, url), "test file", [])

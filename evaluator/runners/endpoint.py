"""Questions sent to an OpenAI-compatible server (vLLM, llama.cpp's server, TGI,
`transformers serve`): the endpoint backend of generative bundles.

Nothing of the submission runs here; what leaves the machine is the answer-free input (each
question's prompt, with demonstrations from a training split), never a gold answer. The
bundle chooses the URL, so the endpoint is a door into the operator's network and time:

- Where: the URL is read once (`policy.endpoint_url_problem`: no dot segments, encoded
  separators, backslashes or `;`), and that one URL is both checked and asked. Every
  connection resolves the host, checks each address and connects to an address it checked
  (no second lookup to rebind): a loopback, private, link-local, multicast, reserved or
  unspecified address (an IPv4 one inside IPv6 too) is refused as `endpoint-refused`
  unless the operator's policy lists the origin (`endpoint_origins`). Redirects are not
  followed (a 3xx is `endpoint-error`), and the environment is not read: no netrc, proxy
  or CA bundle of the controller's.
- Time: each request has a wall-clock deadline of `endpoint.timeout`, however slowly the
  server sends (a watch shuts the socket at the deadline); the whole cell has the bundle's
  `resources.timeout`, retries and waits included (a wait that would pass it fails the cell
  at once as `timeout`). SIGTERM, Ctrl-C or a failed question stop the cell within a poll
  (0.1 s) plus a shut socket's return.
- Concurrency: `endpoint.concurrency` workers take one question at a time; nothing is
  queued ahead of them, so a million questions cost what a few do.
- Failures: a refused connection or a time-out, and 429 or 5xx answers, are retried with
  exponential back-off (a `Retry-After` of up to 30 s is honoured) `endpoint.retries`
  times; then the cell fails as `endpoint-unreachable` or `endpoint-error`. Any other 4xx
  (an unknown model name, a bad request, a refused key) fails at once as `endpoint-refused`.
  A response body over 1 MiB fails as `output-too-large`, read no further. A 2xx that is
  not UTF-8 JSON of an OpenAI-style completion (too deeply nested, NaN or an infinity, a
  lone surrogate) is `endpoint-error`. A failure line names the status, the size and what
  was wrong, never a byte of the reply: a loopback service's reply could hold its secrets.
- Resuming: every answered request is kept under `<workspace>/responses/`, named by the
  sha256 of the request (URL, API, body): a run killed half-way and started again sends
  only the requests that were never answered.
- The API key is read from the environment variable `endpoint.api_key_env` when a request
  is sent, and only where the operator's policy grants that variable to the endpoint's URL
  (`endpoint_keys`): a bundle chooses both, so it could otherwise have any secret of the
  controller's environment sent to a server of its own. It is in no file, record, log or
  message.
"""

from __future__ import annotations

import errno
import http.client
import http.cookiejar
import ipaddress
import json
import math
import os
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.exceptions import HTTPError as ClientError
from urllib3.exceptions import TimeoutError as ClientTimeout

from evaluator.bundles import policy
from evaluator.core import settings
from evaluator.core.errors import RunFailure
from evaluator.core.files import write_atomic
from evaluator.core.gate import Refused, parse_json, read_json
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.qa.prompting import GenerationSpec, Prompted
from evaluator.runners import interrupts

RESPONSE_CAP = 1 << 20
BACKOFF_S = 0.5
MAX_WAIT_S = 30.0
POLL_S = 0.1  # how often deadlines and a stop are looked at
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # an IPv4 address inside IPv6, translated


def responses_dir() -> Path:
    return settings.workspace_dir() / "responses"


def refused_address(address: str) -> str | None:
    """What makes `address` (as resolution gives it) one that no endpoint may reach unless
    the operator lists its origin, or None for a public address. An IPv4 address that IPv6
    carries (mapped, 6to4, Teredo, NAT64) is judged as itself."""
    ip = ipaddress.ip_address(address.split("%")[0])
    seen = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        seen += [inner for inner in (ip.ipv4_mapped, ip.sixtofour,
                                     ip.teredo[1] if ip.teredo else None,
                                     ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
                                     if ip in NAT64 else None) if inner is not None]
    for each in seen:
        for kind in ("loopback", "unspecified", "link_local", "site_local", "multicast",
                     "private", "reserved"):
            if getattr(each, f"is_{kind}", False):  # site-local: IPv6's fec0::/10 only
                return kind.replace("_", "-")
        if not each.is_global:
            return "not global"
    return None


class _Request:
    """One request in flight: when it must end, the sockets it used (so that the watch can
    shut them), and why it was cut short, if it was."""

    __slots__ = ("deadline", "socks", "cut")

    def __init__(self, deadline: float):
        self.deadline, self.socks, self.cut = deadline, [], ""


class Endpoint:
    """One generative bundle's server, as `endpoint:` in its bundle.yaml describes it;
    `time_limit` bounds everything it is asked from now on (the cell's resources.timeout)."""

    def __init__(self, ref: dict, label: str, cache: Path | None = None,
                 time_limit: float | None = None):
        self.label, self.ref = label, ref
        base = str(ref["url"]).rstrip("/")
        problem = policy.endpoint_url_problem(base)
        if problem:
            raise RunFailure("endpoint-refused", f"{label}: endpoint.url {base} {problem}")
        self.url = base + ("/chat/completions" if ref["api"] == "chat" else "/completions")
        self.cache = cache or responses_dir()
        self.timeout = float(ref["timeout"])
        self.time_limit = time_limit
        self.deadline = time.monotonic() + time_limit if time_limit else math.inf
        self.sent = 0  # requests this run sent (answered or not)
        self._policy = policy.current()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._stop = threading.Event()
        self._requests: set[_Request] = set()
        self._pools = _pool_classes(self)

    def body(self, prompt: str, spec: GenerationSpec) -> dict:
        common = {"model": self.ref["model"], "max_tokens": spec.max_new_tokens,
                  "temperature": 0} | ({"stop": list(spec.stop)} if spec.stop else {})
        if self.ref["api"] == "chat":
            return {**common, "messages": [{"role": "user", "content": prompt}]}
        return {**common, "prompt": prompt}

    def cached_path(self, body: dict) -> Path:
        key = sha256_bytes(canonical_json({"url": self.url, "body": body}))
        return self.cache / key[:2] / f"{key}.json"

    def ask(self, body: dict) -> str:
        """The generated text for one request: from the cache, else from the server."""
        path = self.cached_path(body)
        if path.is_file():
            try:
                return _checked_text(read_json(path, RESPONSE_CAP)["text"])
            except (Refused, KeyError, TypeError, ValueError):
                pass  # a damaged entry is asked again
        text = self._post(body)
        write_atomic(path, json.dumps({"text": text}).encode())
        return text

    def stop(self) -> None:
        """Ask nothing more and cut what is in flight (at the next `enforce`)."""
        self._stop.set()

    def stopping(self) -> bool:
        return self._stop.is_set() or interrupts.stopping()

    def enforce(self) -> None:
        """Shut the sockets of every request past its deadline, or of all once stopping: a
        read blocked on a slow server returns at once."""
        now, stopping = time.monotonic(), self.stopping()
        with self._lock:  # held while shutting: a request's own sockets close under it
            for request in [r for r in self._requests
                            if stopping or r.cut or now >= r.deadline]:
                if not request.cut:
                    request.cut = "stop" if stopping else "cell" if now >= self.deadline \
                        else "request"
                for sock in request.socks:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def timed_out(self) -> RunFailure:
        return RunFailure("timeout", f"{self.label}: the endpoint cell ran past its time "
                                     f"limit of {self.time_limit:g} s (resources.timeout)")

    def _check_time(self, wait_s: float = 0.0) -> None:
        if self.stopping():
            raise KeyboardInterrupt("cancelled: this controller is stopping")
        if time.monotonic() + wait_s >= self.deadline:
            raise self.timed_out()

    def _pause(self, seconds: float) -> None:
        """Wait before a retry; a wait past the cell's deadline fails it now."""
        self._check_time(seconds)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._stop.wait(min(POLL_S, left))
            self._check_time()

    def _session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            session = requests.Session()
            session.trust_env = False  # no netrc, proxies or CA bundle from the environment
            session.verify = self._policy.endpoint_ca_bundle or True  # the operator's CAs
            session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
            adapter = _Adapter(self._pools)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session = session
        return self._local.session

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json",  # a reply the cap reads as it is
                   "Accept-Encoding": "identity"}
        name = self.ref.get("api_key_env")
        if name:
            if not self._policy.key_allowed(name, self.url):
                raise RunFailure("endpoint-refused", f"{self.label}: the operator's policy does "
                                 f"not let {name} be sent to {self.ref['url']} (grant it with "
                                 f"endpoint_keys in the policy file, $QASHIFT_POLICY)")
            key = os.environ.get(name)
            if not key:
                raise RunFailure("endpoint-refused", f"{self.label}: the environment variable "
                                 f"{name} (endpoint.api_key_env) is not set")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post(self, body: dict) -> str:
        retries, problem, unreachable = int(self.ref["retries"]), "", True
        for attempt in range(retries + 1):
            if attempt:
                self._pause(min(MAX_WAIT_S, BACKOFF_S * 2 ** (attempt - 1)))
            self._check_time()
            headers = self._headers()
            with self._lock:
                self.sent += 1
            outcome = self._once(body, headers)
            if isinstance(outcome, str):  # no answer: refused, failed or timed out
                problem, unreachable = outcome, True
                continue
            status, data, wait_s = outcome
            size, unreachable = f"HTTP {status}, {len(data):,} bytes", False
            if len(data) > RESPONSE_CAP:
                raise RunFailure("output-too-large", f"{self.label}: the endpoint answered "
                                 f"with more than {RESPONSE_CAP >> 20} MiB for one question")
            if status == 429 or status >= 500:
                problem = size
                if wait_s and attempt < retries:
                    self._pause(wait_s)
                continue
            if 300 <= status < 400:
                raise RunFailure("endpoint-error", f"{self.label}: {self.url} answered with a "
                                 f"redirect ({size}); redirects are not followed")
            if status >= 400:
                raise RunFailure("endpoint-refused", f"{self.label}: {self.url} refused the "
                                 f"request ({size}; the reply is not shown)")
            if status < 200:
                raise RunFailure("endpoint-error", f"{self.label}: {self.url} answered {size}, "
                                 f"which is not a completion")
            try:
                return _generated_text(data)
            except ValueError as exc:
                raise RunFailure("endpoint-error", f"{self.label}: {self.url} answered {size}, "
                                 f"not an OpenAI-style completion: {exc}") from None
        failure = "endpoint-unreachable" if unreachable else "endpoint-error"
        raise RunFailure(failure, f"{self.label}: {self.url} failed {retries + 1} time(s); "
                         f"last: {problem}")

    def _once(self, body: dict, headers: dict) -> str | tuple[int, bytes, float]:
        """One request: (status, body up to the cap + 1 byte, Retry-After seconds), or what
        kept it from an answer. The request is watched: cut at its deadline or a stop."""
        request = _Request(min(time.monotonic() + self.timeout, self.deadline))
        self._local.request = request
        with self._lock:
            self._requests.add(request)
        response, problem = None, ""
        try:
            limit = max(0.001, request.deadline - time.monotonic())
            response = self._session().post(self.url, json=body, headers=headers,
                                            timeout=(limit, limit), stream=True,
                                            allow_redirects=False)
            data = response.raw.read(RESPONSE_CAP + 1, decode_content=True)
        except RunFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - a cut socket fails in many ways
            if not request.cut and not isinstance(exc, (requests.RequestException, ClientError,
                                                         http.client.HTTPException, OSError)):
                raise
            problem = _why(exc, self.timeout)
        finally:
            with self._lock:
                self._requests.discard(request)
                for sock in request.socks:
                    sock.close()
            self._local.request = None
            if response is not None:
                response.close()
        if request.cut == "stop":
            raise KeyboardInterrupt("cancelled: this controller is stopping")
        if request.cut == "cell":
            raise self.timed_out()
        if request.cut == "request":
            return f"no complete answer within {self.timeout:g} s"
        if problem:
            return problem
        return response.status_code, data, _retry_after(response.headers.get("Retry-After"))

    def watch(self, sock: socket.socket | None) -> None:
        """Note that this thread's request uses `sock`, so the watch can shut it. What is
        kept is a duplicate of its descriptor, closed when the request ends: TLS takes the
        socket's own descriptor over (the socket object then shuts nothing), and a
        connection drops its socket once a reply that closes it has started, while a
        duplicate shuts the connection whatever holds it."""
        request = getattr(self._local, "request", None)
        if request is not None and sock is not None:
            try:
                duplicate = socket.fromfd(sock.fileno(), sock.family, sock.type)
            except OSError:  # already closed: nothing left to shut
                return
            with self._lock:
                request.socks.append(duplicate)

    def connect(self, conn: HTTPConnection, scheme: str) -> socket.socket:
        """The socket of a new connection: resolved once, every address checked (unless the
        operator lists the origin), connected to an address that was checked."""
        try:
            found = socket.getaddrinfo(conn._dns_host, conn.port, 0, socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise NameResolutionError(conn.host, conn, exc) from exc
        if not self._policy.origin_allowed(scheme, conn.host, conn.port):
            for *_, address in found:
                why = refused_address(address[0])
                if why:
                    raise RunFailure("endpoint-refused", f"{self.label}: {conn.host} resolves "
                                     f"to {address[0]} ({why}), not a public address; an "
                                     f"endpoint may be there only at an origin the operator "
                                     f"lists (endpoint_origins in $QASHIFT_POLICY)")
        request = getattr(self._local, "request", None)
        limit = conn.timeout if isinstance(conn.timeout, (int, float)) else self.timeout
        last: OSError | None = None
        for family, kind, proto, _, address in found:
            sock = socket.socket(family, kind, proto)
            try:
                for option in conn.socket_options or ():
                    sock.setsockopt(*option)
                self.watch(sock)
                _connect_watched(sock, address, limit, request)
                sock.settimeout(limit)
                return sock
            except ConnectTimeoutError:
                sock.close()
                raise ConnectTimeoutError(conn, f"no connection within {limit:g} s") from None
            except OSError as exc:
                sock.close()
                last = exc
        raise NewConnectionError(conn, f"Failed to establish a new connection: {last}") \
            from last


def _connect_watched(sock: socket.socket, address: tuple, limit: float,
                     request: _Request | None) -> None:
    """Connect without blocking past `limit` or past the request being cut."""
    sock.setblocking(False)
    code = sock.connect_ex(address)
    end = time.monotonic() + limit
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    while code in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
        if request is not None and request.cut:
            raise ConnectTimeoutError("cut short")
        left = end - time.monotonic()
        if left <= 0:
            raise ConnectTimeoutError("timed out")
        if poller.poll(1000 * min(POLL_S, left)):
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code:
        raise OSError(code, os.strerror(code))


def _pool_classes(endpoint: Endpoint) -> dict[str, type]:
    """Connection pools whose connections `endpoint` makes and watches."""

    class Http(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            return endpoint.connect(self, "http")

    class Https(HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            return endpoint.connect(self, "https")

    class Watched:
        def _get_conn(self, timeout=None):
            conn = super()._get_conn(timeout)
            endpoint.watch(conn.sock)  # a kept-alive connection's
            return conn

    class HttpPool(Watched, HTTPConnectionPool):
        ConnectionCls = Http

    class HttpsPool(Watched, HTTPSConnectionPool):
        ConnectionCls = Https

    return {"http": HttpPool, "https": HttpsPool}


class _Adapter(HTTPAdapter):
    """requests' adapter with the endpoint's own connection pools."""

    def __init__(self, pools: dict[str, type]):
        self._pools = pools
        super().__init__()

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pools


def ask_all(endpoint: Endpoint, items: Sequence[Prompted], spec: GenerationSpec,
            progress: bool = True) -> dict[str, str]:
    """{question id: generated text} for every prompted question, `concurrency` workers
    each taking the next question when free (none is queued ahead); the first failure, the
    cell's time limit or a stop (SIGTERM, Ctrl-C) ends the rest, in flight included (what
    was answered stays cached)."""
    texts: dict[str, str] = {}
    failures: list[BaseException] = []
    lock, done, total = threading.Lock(), 0, len(items)
    questions = iter(items)
    workers_left = int(endpoint.ref["concurrency"])
    finished = threading.Event()

    def work() -> None:
        nonlocal done, workers_left
        try:
            while not endpoint.stopping():
                with lock:
                    item = next(questions, None)
                if item is None:
                    return
                text = endpoint.ask(endpoint.body(item.prompt, spec))
                with lock:
                    texts[item.id] = text
                    done += 1
                    if progress and (done % 100 == 0 or done == total):
                        print(f"{endpoint.label}: {done}/{total} answered", file=sys.stderr)
        except BaseException as exc:  # noqa: BLE001 - handed to the cell's thread
            with lock:
                failures.append(exc)
            endpoint.stop()
        finally:
            with lock:
                workers_left -= 1
                if not workers_left:
                    finished.set()

    for number in range(workers_left):
        threading.Thread(target=work, daemon=True,
                         name=f"endpoint-{endpoint.label}-{number}").start()
    try:
        while not finished.wait(POLL_S) and not failures:
            if interrupts.stopping():
                raise KeyboardInterrupt("cancelled: this controller is stopping")
            if time.monotonic() >= endpoint.deadline:
                raise endpoint.timed_out()
            endpoint.enforce()
        if failures:
            raise failures[0]
        if endpoint.stopping():  # stopped from outside before every question was asked
            raise KeyboardInterrupt("cancelled: this endpoint cell was stopped")
    finally:
        endpoint.stop()
        endpoint.enforce()
    return texts


def _generated_text(data: bytes) -> str:
    """The text of an OpenAI-style completion; ValueError saying what is wrong with it, in
    words of its own (never a byte of the reply)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8") from None
    try:
        doc = parse_json(data, "it")
    except Refused as exc:  # its own words, without the detail in brackets
        raise ValueError(str(exc).split(" (")[0]) from None
    except (RecursionError, UnicodeError, ValueError, TypeError):
        raise ValueError("it is not JSON that can be read") from None
    _finite(doc)
    try:
        choice = doc["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("it has no choices[0].text or choices[0].message.content") from None
    if not isinstance(text, str):
        raise ValueError("its completion is not a string")
    return _checked_text(text)


def _finite(doc: object) -> None:
    """ValueError where a parsed reply holds NaN or an infinity (walked without recursion)."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("it holds NaN or an infinity")
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _checked_text(text: object) -> str:
    """A completion that can be written as UTF-8 (no lone surrogate)."""
    if not isinstance(text, str):
        raise ValueError("its completion is not a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("its completion holds a lone surrogate (not Unicode text)") from None
    return text


def _retry_after(value: str | None) -> float:
    try:
        wait = float(value) if value else 0.0
    except ValueError:
        return 0.0
    return min(MAX_WAIT_S, max(0.0, wait)) if math.isfinite(wait) else 0.0


def _why(exc: BaseException, timeout: float) -> str:
    """What kept a request from an answer, in words of ours: the exceptions of the HTTP
    client quote what the server sent (a status line, a header), which stays unshown."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NewConnectionError):  # a subclass of the time-out, but not one
            code = getattr(exc.__cause__, "errno", None)
            return f"the connection failed ({os.strerror(code)})" if code else \
                "the connection failed"
        if isinstance(exc, (requests.Timeout, socket.timeout, ClientTimeout)):
            return f"no complete answer within {timeout:g} s"
        if isinstance(exc, (NameResolutionError, socket.gaierror)):
            return "the host name does not resolve"
        if isinstance(exc, ssl.SSLCertVerificationError):
            return "the server's TLS certificate is not trusted"
        if isinstance(exc, ssl.SSLError):
            return "the TLS connection failed"
        if isinstance(exc, OSError) and exc.errno:
            return f"the connection failed ({os.strerror(exc.errno)})"
        inner = [a for a in getattr(exc, "args", ()) if isinstance(a, BaseException)]
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "reason", None) or \
            (inner[0] if inner else None)
    return "the connection failed or the server broke off its answer"

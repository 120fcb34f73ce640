"""Questions sent to an OpenAI-compatible server (vLLM, llama.cpp's server, TGI,
`transformers serve`): the endpoint backend of generative bundles.

Nothing of the submission runs here; what leaves the machine is the answer-free input (each
question's prompt, with demonstrations from a training split), never a gold answer.

- Concurrency: at most `endpoint.concurrency` requests in flight.
- Failures: a refused connection or a time-out, and 429 or 5xx answers, are retried with
  exponential back-off (a `Retry-After` of up to 30 s is honoured) `endpoint.retries`
  times; then the cell fails as `endpoint-unreachable` or `endpoint-error`. Any other 4xx
  (an unknown model name, a bad request, a refused key) fails at once as `endpoint-refused`.
  A response body over 1 MiB fails as `output-too-large`, read no further.
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

import json
import os
import sys
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

import requests

from evaluator.bundles import policy
from evaluator.core import settings
from evaluator.core.errors import RunFailure
from evaluator.core.files import write_atomic
from evaluator.core.gate import Refused, read_json
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.qa.prompting import GenerationSpec, Prompted

RESPONSE_CAP = 1 << 20
BACKOFF_S = 0.5
MAX_WAIT_S = 30.0


def responses_dir() -> Path:
    return settings.workspace_dir() / "responses"


class Endpoint:
    """One generative bundle's server, as `endpoint:` in its bundle.yaml describes it."""

    def __init__(self, ref: dict, label: str, cache: Path | None = None):
        self.label, self.ref = label, ref
        self.url = ref["url"].rstrip("/") + ("/chat/completions" if ref["api"] == "chat"
                                              else "/completions")
        self.cache = cache or responses_dir()
        self.sent = 0  # requests this run sent (answered or not)
        self._lock = threading.Lock()
        self._local = threading.local()

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
                return str(read_json(path, RESPONSE_CAP)["text"])
            except (Refused, KeyError, TypeError):
                pass  # a damaged entry is asked again
        text = self._post(body)
        write_atomic(path, json.dumps({"text": text}).encode())
        return text

    def _session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        name = self.ref.get("api_key_env")
        if name:
            if not policy.current().key_allowed(name, self.url):
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
                time.sleep(min(MAX_WAIT_S, BACKOFF_S * 2 ** (attempt - 1)))
            with self._lock:
                self.sent += 1
            try:
                response = self._session().post(self.url, json=body, headers=self._headers(),
                                                timeout=float(self.ref["timeout"]), stream=True)
            except (requests.ConnectionError, requests.Timeout) as exc:
                problem, unreachable = _one_line(exc), True
                continue
            with response:
                data = response.raw.read(RESPONSE_CAP + 1, decode_content=True)
            if len(data) > RESPONSE_CAP:
                raise RunFailure("output-too-large", f"{self.label}: the endpoint answered "
                                 f"with more than {RESPONSE_CAP >> 20} MiB for one question")
            status, unreachable = response.status_code, False
            if status == 429 or status >= 500:
                problem = f"HTTP {status}: {_message(data)}"
                wait_s = _retry_after(response.headers.get("Retry-After"))
                if wait_s:
                    time.sleep(wait_s)
                continue
            if status >= 400:
                raise RunFailure("endpoint-refused", f"{self.label}: {self.url} refused the "
                                 f"request (HTTP {status}: {_message(data)})")
            return _generated_text(data, self.label)
        failure = "endpoint-unreachable" if unreachable else "endpoint-error"
        raise RunFailure(failure, f"{self.label}: {self.url} failed {retries + 1} time(s); "
                         f"last: {problem}")


def ask_all(endpoint: Endpoint, items: list[Prompted], spec: GenerationSpec,
            progress: bool = True) -> dict[str, str]:
    """{question id: generated text} for every prompted question, `concurrency` at a time;
    the first failure stops the rest (what was answered stays cached)."""
    texts: dict[str, str] = {}
    done, stop = 0, threading.Event()

    def one(item: Prompted) -> None:
        nonlocal done
        if stop.is_set():
            return  # another question failed: this one is not asked
        try:
            texts[item.id] = endpoint.ask(endpoint.body(item.prompt, spec))
        except BaseException:
            stop.set()
            raise
        with endpoint._lock:
            done += 1
            if progress and (done % 100 == 0 or done == len(items)):
                print(f"{endpoint.label}: {done}/{len(items)} answered", file=sys.stderr)

    with ThreadPoolExecutor(max_workers=int(endpoint.ref["concurrency"])) as pool:
        futures = [pool.submit(one, item) for item in items]
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in finished if f.exception() is not None]
        if failed:
            for future in futures:
                future.cancel()
            raise failed[0].exception()
    return texts


def _generated_text(data: bytes, label: str) -> str:
    try:
        doc = json.loads(data)
        choice = doc["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise RunFailure("endpoint-error", f"{label}: the endpoint's answer is not an "
                         f"OpenAI-style completion ({data[:120]!r})") from None
    if not isinstance(text, str):
        raise RunFailure("endpoint-error", f"{label}: the endpoint's answer holds no text")
    return text


def _message(data: bytes) -> str:
    """A server's error message, one line, short."""
    try:
        doc = json.loads(data)
        error = doc.get("error", doc.get("detail", doc)) if isinstance(doc, dict) else doc
        text = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        text = data.decode("utf-8", errors="replace")
    return " ".join(str(text).split())[:200] or "no message"


def _retry_after(value: str | None) -> float:
    try:
        return min(MAX_WAIT_S, max(0.0, float(value))) if value else 0.0
    except ValueError:
        return 0.0


def _one_line(exc: Exception) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]

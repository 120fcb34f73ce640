"""The operator's sandbox policy: what a submission gets by default and the most it may ask.

A bundle's `resources:` may ask for less than the caps, never more; everything that decides
isolation (the user a container runs as, a writable root, network during image builds) is
the operator's alone and is not a bundle key. The policy is built in, or read from a YAML
file named by $QASHIFT_POLICY:

    defaults: {cpus: 1, memory: 4g, timeout: 3600}
    caps: {memory: 32g, timeout: 86400, gpus: 2}
    build_network: none        # or bridge: network for `RUN` steps of submission images
    endpoint_origins:          # where a generative endpoint may be although its address is
      - http://127.0.0.1:8000  # not public (loopback, private, link-local...): none by default
    endpoint_keys:             # the API keys a generative endpoint bundle may have sent,
      OPENAI_API_KEY: https://api.openai.com/v1   # each only to URLs under its prefix
    endpoint_ca_bundle: /etc/ssl/our-ca.pem   # the CAs an https endpoint is checked against
                                              # (default: certifi's; the environment's never)
    webhook_origins:           # where the service may POST its notices (a submission's
      - https://hooks.example.org  # `webhook`): none by default
    tiers:                     # what each tier of the service's users may use (a user's tier:
      default: {submissions_per_day: 20, upload_bytes: 1g}   # `admin user add --tier`);
      student: {submissions_per_day: 3, running_jobs: 1,     # no limit where none is given
                cpu_hours_per_week: 24, gpu_hours_per_week: 2}

A value out of the policy (unknown key, wrong type, not finite, not positive, above a cap)
is a one-line ConfigError naming the bundle file and the key. An endpoint URL is read one
way only (`endpoint_url_problem`): the key check and the request see the same URL.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlsplit

from evaluator.core import settings
from evaluator.core.errors import ConfigError, UserError
from evaluator.core.folders import read_yaml

RESOURCES = ("gpus", "cpus", "memory", "timeout", "pids", "output")
DEFAULTS = {"gpus": 0, "cpus": 1.0, "memory": 4 << 30, "timeout": 3600.0, "pids": 512,
            "output": 1 << 30}
CAPS = {"gpus": 8, "cpus": 64.0, "memory": 256 << 30, "timeout": 7 * 86400.0, "pids": 4096,
        "output": 64 << 30}
USER = "65534:65534"  # nobody:nogroup: containers never run as root
BUILD_NETWORKS = ("none", "bridge", "default")
KEY_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
POLICY_KEYS = ("defaults", "caps", "build_network", "endpoint_origins", "endpoint_keys",
               "endpoint_ca_bundle", "tiers", "webhook_origins")
TIER_LIMITS = ("submissions_per_day", "upload_bytes", "running_jobs", "cpu_hours_per_week",
               "gpu_hours_per_week")  # per user of the service
TIER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
URL_HOST = re.compile(r"[a-z0-9._-]+|\[[0-9a-f:.]+\]", re.IGNORECASE)
URL_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,=:@/%-]*")
UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
MEMORY_KEYS = ("memory", "output")


def parse_memory(value: int | float | str) -> int:
    """Bytes from 4g, 512m, 1.5GiB, 1048576 (plain numbers are bytes)."""
    if isinstance(value, bool):
        raise UserError(f"cannot read memory size {value!r}; use e.g. 512m or 4g")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise UserError(f"memory size {value!r} is not finite")
        return int(value)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b)?\s*", str(value).lower())
    if not match:
        raise UserError(f"cannot read memory size {value!r}; use e.g. 512m or 4g")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _value(key: str, raw: object) -> float | int:
    """One resource value as a number of its unit, or a UserError saying why not."""
    if isinstance(raw, bool) or raw is None:
        raise UserError(f"{key} must be a number, got {raw!r}")
    if key in MEMORY_KEYS:
        try:
            value: float | int = parse_memory(raw)  # type: ignore[arg-type]
        except UserError:
            raise UserError(f"{key} {raw!r} is not a size; use e.g. 512m or 4g") from None
    elif isinstance(raw, (int, float)):
        value = raw
    else:
        raise UserError(f"{key} must be a number, got {raw!r}")
    if not math.isfinite(value):
        raise UserError(f"{key} must be finite, got {raw!r}")
    if key in ("gpus", "pids") and value != int(value):
        raise UserError(f"{key} must be a whole number, got {raw!r}")
    if value < 0 or (value == 0 and key != "gpus"):
        raise UserError(f"{key} must be positive, got {raw!r}")
    return int(value) if key in ("gpus", "pids", *MEMORY_KEYS) else float(value)


@dataclass(frozen=True)
class Policy:
    defaults: dict = field(default_factory=lambda: dict(DEFAULTS))
    caps: dict = field(default_factory=lambda: dict(CAPS))
    user: str = USER
    build_network: str = "none"
    endpoint_keys: dict = field(default_factory=dict)  # variable -> URL prefix it may go to
    endpoint_origins: frozenset = frozenset()  # (scheme, host, port) at any address
    endpoint_ca_bundle: str | None = None  # a PEM file of CAs for https endpoints
    tiers: dict = field(default_factory=lambda: {"default": {}})  # tier -> limit -> number
    webhook_origins: frozenset = frozenset()  # (scheme, host, port) the service may POST to

    @classmethod
    def from_file(cls, path: Path) -> Policy:
        data = read_yaml(path)
        unknown = set(data) - set(POLICY_KEYS)
        if unknown:
            raise ConfigError(f"{path}: unknown policy key(s) {', '.join(sorted(unknown))}; "
                              f"allowed: {', '.join(POLICY_KEYS)}")
        parts = {}
        for part in ("defaults", "caps"):
            given = data.get(part) or {}
            if not isinstance(given, dict) or set(given) - set(RESOURCES):
                raise ConfigError(f"{path}: {part} must map some of {', '.join(RESOURCES)} "
                                  f"to values")
            try:
                parts[part] = {**(DEFAULTS if part == "defaults" else CAPS),
                               **{k: _value(k, v) for k, v in given.items()}}
            except UserError as exc:
                raise ConfigError(f"{path}: {part}.{exc}") from None
        network = str(data.get("build_network", "none"))
        if network not in BUILD_NETWORKS:
            raise ConfigError(f"{path}: build_network must be one of "
                              f"{', '.join(BUILD_NETWORKS)}")
        for key, value in parts["defaults"].items():
            if value > parts["caps"][key]:
                raise ConfigError(f"{path}: the default {key} {value} is above its cap")
        return cls(parts["defaults"], parts["caps"], USER, network,
                   _endpoint_keys(data.get("endpoint_keys") or {}, path),
                   _endpoint_origins(data.get("endpoint_origins"), path),
                   _ca_bundle(data.get("endpoint_ca_bundle"), path),
                   _tiers(data.get("tiers"), path),
                   _endpoint_origins(data.get("webhook_origins"), path, "webhook_origins"))

    def tier(self, name: str) -> dict:
        """The limits of a tier (none for a tier the policy no longer names: its users are
        held to the default tier's)."""
        return self.tiers.get(name, self.tiers.get("default", {}))

    def key_allowed(self, name: str, url: str) -> bool:
        """Whether the operator lets the key in variable `name` be sent to `url`: a URL read
        one way only (see `endpoint_url_problem`), with the same scheme, host and port as the
        prefix granted to it and a path at or under the prefix's."""
        granted = self.endpoint_keys.get(name)
        if granted is None or endpoint_url_problem(url) is not None:
            return False
        have, prefix = urlsplit(url), urlsplit(granted).path.rstrip("/")
        return _origin(url) is not None and _origin(url) == _origin(granted) and \
            not have.username and (have.path == prefix or have.path.startswith(prefix + "/"))

    def webhook_allowed(self, url: str) -> bool:
        """Whether the operator lists the origin of `url` in `webhook_origins`."""
        origin = _origin(url) if endpoint_url_problem(url) is None else None
        return origin is not None and \
            (origin[0], (origin[1] or "").strip("[]").lower(), origin[2]) in self.webhook_origins

    def origin_allowed(self, scheme: str, host: str, port: int) -> bool:
        """Whether the operator lists this origin in `endpoint_origins`, so that it is
        connected to whatever its address (else only public addresses are)."""
        return (scheme, host.strip("[]").lower(), port) in self.endpoint_origins

    def resources(self, requested: object, where: Path | str) -> dict:
        """The bundle's resources: the defaults with what it asks for, checked against the
        caps; a one-line ConfigError for anything out of policy."""
        if requested is None:
            requested = {}
        if not isinstance(requested, dict):
            raise ConfigError(f"{where}: resources must be a mapping of "
                              f"{', '.join(RESOURCES)}")
        unknown = sorted(set(requested) - set(RESOURCES))
        if unknown:
            raise ConfigError(f"{where}: resources.{unknown[0]} is not a resource; allowed: "
                              f"{', '.join(RESOURCES)}")
        out = dict(self.defaults)
        for key, raw in requested.items():
            try:
                value = _value(key, raw)
            except UserError as exc:
                raise ConfigError(f"{where}: resources.{exc}") from None
            if value > self.caps[key]:
                raise ConfigError(f"{where}: resources.{key} {raw!r} is above the operator's "
                                  f"cap of {self.caps[key]:g}")
            out[key] = value
        return out


def _tiers(given: object, path: Path) -> dict:
    """`tiers:` checked: names of tiers, each mapping some of TIER_LIMITS to a whole number
    (`upload_bytes` a size such as 1g)."""
    if given is None:
        return {"default": {}}
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: tiers must map tier names to their limits")
    tiers = {}
    for name, limits in given.items():
        if not isinstance(name, str) or not TIER_NAME.fullmatch(name):
            raise ConfigError(f"{path}: tier name {str(name)[:40]!r}: lower-case letters, "
                              f"digits, '_' and '-'")
        if not isinstance(limits, dict) or set(limits) - set(TIER_LIMITS):
            raise ConfigError(f"{path}: tiers.{name} must map some of "
                              f"{', '.join(TIER_LIMITS)} to numbers")
        tiers[name] = {}
        for key, raw in limits.items():
            try:
                value = parse_memory(raw) if key == "upload_bytes" else raw
            except UserError as exc:
                raise ConfigError(f"{path}: tiers.{name}.{key}: {exc}") from None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{path}: tiers.{name}.{key} must be a whole number of at "
                                  f"least 0, got {raw!r}")
            tiers[name][key] = value
    return {"default": {}, **tiers}


_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str | None, int] | None:
    """(scheme, host, port, the scheme's own where none is given) of an http(s) URL; None
    for another scheme or a port that is not a positive number."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port that is not a number
        return None
    if parts.scheme not in _PORTS or (port is not None and port <= 0):
        return None
    return parts.scheme, parts.hostname, port or _PORTS[parts.scheme]


def endpoint_url_problem(url: str) -> str | None:
    """Why `url` cannot name an endpoint, or None. An endpoint URL is http(s) with a host
    and no user, query or fragment, and a path that a key check, the HTTP client and a server
    all read alike: no `.` or `..` segments, empty segments, backslashes or `;`, and no
    percent-escape of a separator, a dot, `%` or any character that needs none (the client
    would write those back as that character, a server could read them as a separator)."""
    parts = urlsplit(url)
    if _origin(url) is None or not parts.hostname or "?" in url or "#" in url:
        return "is not an http(s) URL with a host, a valid port and no query or fragment"
    host = parts.netloc.rpartition(":")[0] if parts.port is not None else parts.netloc
    if "@" in parts.netloc or not URL_HOST.fullmatch(host):
        return "names a user or a host that is not a plain name or address"
    if not URL_PATH.fullmatch(parts.path):
        return ("has a path with a character other than letters, digits and "
                "-._~!$&'()*+,=:@/ (a backslash, `;`, a space...)")
    for escape in re.findall(r"%(.{0,2})", parts.path):
        if not re.fullmatch(r"[0-9A-Fa-f]{2}", escape):
            return "has a path with a broken percent-escape"
        byte = unquote_to_bytes("%" + escape)[0]
        if byte in UNRESERVED or byte in b"/\\;%" or byte < 0x20 or byte == 0x7F:
            return f"has a path with the percent-escape %{escape} (an encoded separator, dot " \
                   f"or plain character)"
    segments = parts.path.split("/")[1:]
    if any(segment in (".", "..") for segment in segments):
        return "has a path with a dot segment (. or ..)"
    if "" in segments[:-1]:
        return "has a path with an empty segment (//)"
    return None


def _ca_bundle(given: object, path: Path) -> str | None:
    """`endpoint_ca_bundle:` checked: a PEM file that exists (relative to the policy file)."""
    if given is None:
        return None
    where = path.parent / given if isinstance(given, str) else None
    if where is None or not where.is_file():
        raise ConfigError(f"{path}: endpoint_ca_bundle: {given!r} is not a PEM file of "
                          f"certificate authorities")
    return str(where.resolve())


def _endpoint_origins(given: object, path: Path, key: str = "endpoint_origins") -> frozenset:
    """`endpoint_origins:` (or `webhook_origins:`) checked: a list of http(s) origins (scheme,
    host, port; no path)."""
    if given is None:
        return frozenset()
    if not isinstance(given, list):
        raise ConfigError(f"{path}: {key} must be a list of origins such as "
                          f"http://127.0.0.1:8000")
    origins = set()
    for url in given:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or _origin(url) is None or endpoint_url_problem(url) is not None \
                or parts.path not in ("", "/"):
            raise ConfigError(f"{path}: {key}: {url!r} is not an http(s) origin "
                              f"(scheme, host and port only) such as http://127.0.0.1:8000")
        origins.add(_origin(url))
    return frozenset(origins)


def _endpoint_keys(given: object, path: Path) -> dict:
    """`endpoint_keys:` checked: variable names to http(s) URL prefixes."""
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: endpoint_keys must map environment variables to URLs")
    for name, url in given.items():
        if not isinstance(name, str) or not KEY_NAME.fullmatch(name):
            raise ConfigError(f"{path}: endpoint_keys: {name!r} is not an environment "
                              f"variable name (A-Z, 0-9, _)")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or _origin(url) is None or not parts.hostname or parts.username \
                or parts.query or parts.fragment:
            raise ConfigError(f"{path}: endpoint_keys.{name}: {url!r} is not an http(s) URL "
                              f"prefix such as https://api.example.com/v1")
    return dict(given)


@cache
def _load(path: str | None) -> Policy:
    return Policy.from_file(Path(path)) if path else Policy()


def current() -> Policy:
    """The policy named by the settings ($QASHIFT_POLICY), else the built-in one."""
    path = settings.current().policy
    return _load(str(path) if path else None)

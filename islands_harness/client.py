"""HTTP client of the tooling: `/generate` (plain and streaming), `/metrics`, a metrics sampler.

Every benchmark, the equality gate, the demo, the soak and the server tests talk to the server
through this module, so a request is built, and a Prometheus sample parsed, in one place.

- `generate(base_url, ids, n)`: one greedy (temperature 0, `ignore_eos`) `/generate` on token ids;
  `GenerateResult` carries `output_ids` and `meta_info` (`cached_tokens`, `prompt_tokens`, ...).
- `StreamingRequest`: the same request streamed in a background thread; the cumulative
  `output_ids` (sglang's default, non-incremental streaming) are readable while it runs.
- `Metrics`: `/metrics` text as `(name, labels, value)` samples; `value(name, labels)` sums the
  samples whose labels include `labels`. `fetch_metrics(base_url)` reads and parses it.
- `MetricsSampler`: `fetch_metrics` every `interval_s` in a thread, keeping the fields asked for.

Timeouts are seconds. Errors of the server (a non-200 answer, an error event in a stream) raise
`ServerError` with the status and the start of the body.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import requests


class ServerError(RuntimeError):
    pass


# ---- /generate -----------------------------------------------------------------------------------


@dataclasses.dataclass
class GenerateResult:
    output_ids: list[int]
    meta_info: dict[str, Any]
    text: str | None = None

    @property
    def cached_tokens(self) -> int:
        return int(self.meta_info.get("cached_tokens", 0) or 0)

    @property
    def prompt_tokens(self) -> int:
        return int(self.meta_info.get("prompt_tokens", 0) or 0)

    @property
    def completion_tokens(self) -> int:
        return int(self.meta_info.get("completion_tokens", len(self.output_ids)) or 0)

    @property
    def finish_reason(self) -> Optional[str]:
        return (self.meta_info.get("finish_reason") or {}).get("type")


def generate_body(ids: Sequence[int], max_new_tokens: int, *, ignore_eos: bool = True,
                  sampling_params: Optional[Mapping[str, Any]] = None,
                  **fields: Any) -> dict[str, Any]:
    """The JSON body of a greedy `/generate` on token ids; `fields` (rid, stream, extra_key, ...)
    go in as given, `sampling_params` override the greedy defaults."""
    sp = {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": ignore_eos,
          **(sampling_params or {})}
    return {"input_ids": list(ids), "sampling_params": sp, **fields}


_sessions = threading.local()


def thread_session() -> requests.Session:
    """One keep-alive `requests.Session` per thread (a Session is not thread-safe)."""
    if not hasattr(_sessions, "s"):
        _sessions.s = requests.Session()
    return _sessions.s


def generate(base_url: str, ids: Sequence[int], max_new_tokens: int, *, timeout: float = 600.0,
             session: Optional[requests.Session] = None, ignore_eos: bool = True,
             sampling_params: Optional[Mapping[str, Any]] = None, **fields: Any) -> GenerateResult:
    """One greedy `/generate` on token ids; raises `ServerError` unless the answer is 200."""
    body = generate_body(ids, max_new_tokens, ignore_eos=ignore_eos,
                         sampling_params=sampling_params, **fields)
    r = (session or requests).post(f"{base_url}/generate", json=body, timeout=timeout)
    if r.status_code != 200:
        raise ServerError(f"/generate returned {r.status_code}: {r.text[:500]}")
    j = r.json()
    return GenerateResult(output_ids=list(j.get("output_ids") or []),
                          meta_info=j.get("meta_info") or {}, text=j.get("text"))


class StreamingRequest:
    """A streaming `/generate` in a background thread.

    `output_ids` is the latest cumulative output seen on the stream; `done` is set when the stream
    ends (`finished_at` is the monotonic time of the last chunk); `result` is the final
    `GenerateResult` (None until done, or when the request failed: `error` says why).
    `on_progress(output_ids)` (optional) runs in the stream's thread after every chunk.
    `abort()` ends the request on the server (`/abort_request` by its rid); the stream then ends
    without an error, its result the output streamed until then.
    """

    def __init__(self, base_url: str, input_ids: Sequence[int], max_new_tokens: int, *,
                 sampling_params: Optional[dict[str, Any]] = None, timeout: float = 1200.0,
                 name: str = "stream", on_progress: Optional[Callable[[list[int]], None]] = None):
        self.base_url = base_url
        self.input_ids = list(input_ids)
        self.max_new_tokens = max_new_tokens
        self.rid = f"{name}-{uuid.uuid4().hex}"
        self.body = generate_body(input_ids, max_new_tokens, sampling_params=sampling_params,
                                  stream=True, rid=self.rid)
        self.aborted = False
        self.timeout = timeout
        self.name = name
        self.on_progress = on_progress
        self.output_ids: list[int] = []
        self.meta_info: dict[str, Any] = {}
        self.result: Optional[GenerateResult] = None
        self.error: Optional[BaseException] = None
        self.started_at: Optional[float] = None
        self.finished_at: Optional[float] = None
        self.done = threading.Event()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"stream-{name}", daemon=True)

    def start(self) -> "StreamingRequest":
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def _events(self, r: requests.Response) -> Iterable[dict[str, Any]]:
        for raw in r.iter_lines():
            if not raw or not raw.startswith(b"data:"):
                continue
            data = raw[5:].strip()
            if data == b"[DONE]":
                return
            d = json.loads(data)
            if "error" in d:
                raise ServerError(f"/generate (stream) error: {d['error']}")
            yield d

    def _run(self) -> None:
        try:
            with requests.post(f"{self.base_url}/generate", stream=True, timeout=self.timeout,
                               json=self.body) as r:
                if r.status_code != 200:
                    raise ServerError(f"/generate (stream) returned {r.status_code}: "
                                      f"{r.text[:500]}")
                for d in self._events(r):
                    with self._cv:
                        if "output_ids" in d:
                            self.output_ids = list(d["output_ids"])
                        self.meta_info = d.get("meta_info", self.meta_info) or {}
                        self._cv.notify_all()
                    if self.on_progress is not None:
                        self.on_progress(list(self.output_ids))
            self.result = GenerateResult(output_ids=list(self.output_ids),
                                         meta_info=dict(self.meta_info))
        except BaseException as e:  # reported by wait()/wait_generated()
            if self.aborted and isinstance(e, (ServerError, requests.RequestException)):
                self.result = GenerateResult(output_ids=list(self.output_ids),
                                             meta_info=dict(self.meta_info))
            else:
                self.error = e
        finally:
            self.finished_at = time.monotonic()
            with self._cv:
                self.done.set()
                self._cv.notify_all()

    def abort(self, timeout: float = 60.0) -> None:
        """Abort the request on the server (no-op once the stream ended)."""
        if self.done.is_set():
            return
        self.aborted = True
        r = requests.post(f"{self.base_url}/abort_request", json={"rid": self.rid},
                          timeout=timeout)
        if r.status_code != 200:
            raise ServerError(f"{self.name}: /abort_request returned {r.status_code}: "
                              f"{r.text[:500]}")

    def generated(self) -> int:
        with self._cv:
            return len(self.output_ids)

    def snapshot(self) -> list[int]:
        with self._cv:
            return list(self.output_ids)

    def wait_generated(self, n: int, timeout: float = 1200.0) -> list[int]:
        """Block until at least `n` tokens were streamed; return the output so far (a copy).
        Raises if the request failed or ended with fewer tokens, or on timeout."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while len(self.output_ids) < n:
                if self.done.is_set():
                    raise ServerError(f"{self.name}: stream ended after {len(self.output_ids)} "
                                      f"tokens, wanted {n} (error: {self.error!r})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: {len(self.output_ids)} of {n} tokens "
                                       f"after {timeout:.0f} s")
                self._cv.wait(min(left, 1.0))
            return list(self.output_ids)

    def wait(self, timeout: float = 1200.0) -> GenerateResult:
        if not self.done.wait(timeout):
            raise TimeoutError(f"{self.name}: not finished after {timeout:.0f} s")
        self._thread.join(timeout=10)
        if self.error is not None:
            raise ServerError(f"{self.name}: {self.error!r}") from self.error
        assert self.result is not None
        return self.result


# ---- /metrics ------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_RAISE = object()

Sample = tuple[str, dict[str, str], float]


class Metrics:
    """Prometheus text as samples `(name, labels, value)`, in the order of the text."""

    def __init__(self, samples: Sequence[Sample]):
        self.samples = list(samples)

    @classmethod
    def parse(cls, text: str) -> "Metrics":
        out = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if m is None:
                continue
            try:
                value = float(m.group(3))
            except ValueError:
                continue
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
        return cls(out)

    def series(self, name: str, labels: Optional[Mapping[str, str]] = None) -> list[float]:
        """Values of `name` whose labels include `labels`."""
        want = labels or {}
        return [v for n, lab, v in self.samples
                if n == name and all(lab.get(k) == x for k, x in want.items())]

    def value(self, name: str, labels: Optional[Mapping[str, str]] = None, *,
              default: Any = _RAISE, agg: Callable[[Iterable[float]], float] = sum) -> Any:
        """`agg` (sum by default) of the series; `default` when there is none, else `KeyError`."""
        vals = self.series(name, labels)
        if not vals:
            if default is _RAISE:
                raise KeyError(f"{name}{dict(labels) if labels else ''} is not in /metrics")
            return default
        return float(agg(vals))

    def pool_tokens(self, pool: str) -> int:
        """Size of one KV pool in tokens, ``pool`` "swa" or "kv" (the full pool): available +
        evictable + used (0 for a gauge the server does not export; stock 0.5.23 exports only
        ``swa_used_tokens``, so callers fall back to the boot log)."""
        return int(sum(self.value(f"sglang:{pool}_{k}_tokens", default=0.0, agg=max)
                       for k in ("available", "evictable", "used")))

    def __contains__(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.samples)

    def last_per_name(self) -> dict[str, float]:
        """`{name: value}`, the last sample of each name (for gauges with one label set)."""
        return {n: v for n, _, v in self.samples}


def fetch_metrics(base_url: str, *, timeout: float = 30.0,
                  session: Optional[requests.Session] = None) -> Metrics:
    """GET `/metrics` (the server needs `--enable-metrics`) and parse it."""
    r = (session or requests).get(f"{base_url}/metrics", timeout=timeout)
    r.raise_for_status()
    return Metrics.parse(r.text)


class MetricsSampler:
    """`fetch_metrics` every `interval_s` seconds in a thread.

    `fields` maps a key to a metric name: each sample is `{"t": monotonic s, key: value, ...}`,
    the maximum over label sets, 0 where the metric is absent. A scrape that fails under load is
    skipped. Use as a context manager, or `start()` / `stop()`.
    """

    def __init__(self, base_url: str, interval_s: float, fields: Mapping[str, str]):
        self.base_url, self.interval_s, self.fields = base_url, interval_s, dict(fields)
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-sampler", daemon=True)

    def start(self) -> "MetricsSampler":
        self._thread.start()
        return self

    def _loop(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                m = fetch_metrics(self.base_url, timeout=5, session=session)
                self.samples.append({"t": t, **{k: m.value(name, default=0.0, agg=max)
                                                for k, name in self.fields.items()}})
            except Exception:  # noqa: BLE001 - a missed sample under load is fine
                pass
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def peak(self, key: str) -> float:
        return max((s[key] for s in self.samples), default=0.0)

    def __enter__(self) -> "MetricsSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


POOL_FIELDS = {
    "running": "sglang:num_running_reqs",
    "queue": "sglang:num_queue_reqs",
    "swa_used": "sglang:swa_used_tokens",
    "full_used": "sglang:kv_used_tokens",
}
"""The sampler fields of the admission-style benchmarks: running and waiting requests, used
tokens of both pools."""

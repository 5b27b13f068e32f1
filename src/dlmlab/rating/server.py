"""Local HTTP server of the rating page (stdlib ``http.server``, bound to 127.0.0.1).

Routes: ``GET /`` page, ``GET /api/next`` -> ``{token, prompt, left, right, rated, total}`` or
``{done: true, ...}``, ``POST /api/choice`` ``{token, choice: left|right|tie}``, ``GET /results``
(win rates, HTML) and ``GET /api/results`` (JSON).  Method names never reach the rating page: the
server keeps which sample is on which side behind a random token.

Hardening: a request whose ``Host`` is not ``localhost`` / ``127.0.0.1`` (any port) is refused with
403 (a web page cannot reach the server through a DNS name of its own, "DNS rebinding"); a socket
that sends nothing for ``timeout`` seconds (a body shorter than its Content-Length, a stalled
header) is closed instead of holding a thread; JSON nested too deeply is a 400, like any bad body.
"""

from __future__ import annotations

import json
import random
import re
import secrets
import socket
import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dlmlab.rating.page import RATE_PAGE, results_page
from dlmlab.rating.samples import Pair, Sample, all_pairs, load_samples
from dlmlab.rating.store import CHOICES, RatingStore

HOST = "127.0.0.1"
MAX_PENDING = 1000
MAX_BODY = 64 * 1024
TIMEOUT_S = 10.0  # seconds a connection may stay silent (socket timeout)
ALLOWED_HOSTS = ("127.0.0.1", "localhost")
_HOST = re.compile(r"^(?P<name>[^:\[\]]+)(?::(?P<port>\d{1,5}))?$")


def host_allowed(value: str | None) -> bool:
    """``localhost`` or ``127.0.0.1``, with or without a port (a tunnel may forward another port)."""
    if not value:
        return False
    m = _HOST.match(value.strip())
    return bool(m) and m.group("name").lower().rstrip(".") in ALLOWED_HOSTS


class RatingApp:
    """Pairs to rate, the store, and the pairs currently shown (token -> pair, left, right)."""

    def __init__(self, samples_path: str | Path | list[str | Path], db_path: str | Path, seed: int | None = None):
        """``samples_path``: one samples file or several (see :func:`~dlmlab.rating.samples.load_samples`)."""
        paths = [Path(p) for p in samples_path] if isinstance(samples_path, (list, tuple)) else [Path(samples_path)]
        self.samples_paths = paths
        self.samples_path = paths[0]
        self.pairs: list[Pair] = all_pairs(load_samples(paths))
        self.store = RatingStore(db_path)
        self.rng = random.Random(seed)
        self.pending: OrderedDict[str, tuple[Pair, Sample, Sample]] = OrderedDict()
        self.lock = threading.Lock()

    def next_pair(self) -> dict:
        """An unrated pair from the least-rated method pair, sides in random order."""
        rated = self.store.rated_keys()
        todo = [p for p in self.pairs if p.key not in rated]
        done = {"rated": len({p.key for p in self.pairs} & rated), "total": len({p.key for p in self.pairs})}
        if not todo:
            return {"done": True, **done}
        counts = self.store.method_pair_counts()
        fewest = min(counts.get(p.methods, 0) for p in todo)
        pair = self.rng.choice([p for p in todo if counts.get(p.methods, 0) == fewest])
        left, right = (pair.a, pair.b) if self.rng.random() < 0.5 else (pair.b, pair.a)
        token = secrets.token_urlsafe(12)
        with self.lock:
            self.pending[token] = (pair, left, right)
            while len(self.pending) > MAX_PENDING:
                self.pending.popitem(last=False)
        return {"done": False, "token": token, "prompt": pair.prompt, "left": left.text, "right": right.text,
                **done}

    def choose(self, token: str, choice: str) -> int | None:
        """Store the choice for ``token``; ``None`` if the token is unknown (expired or already used)."""
        if choice not in CHOICES:
            raise ValueError(f"choice must be one of {list(CHOICES)}")
        with self.lock:
            item = self.pending.pop(token, None)
        if item is None:
            return None
        return self.store.record(*item, choice)


def _handler(app: RatingApp, timeout: float = TIMEOUT_S) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "dlmlab-rate"

        def setup(self) -> None:
            self.timeout = timeout  # StreamRequestHandler applies it to the socket
            super().setup()

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (TimeoutError, socket.timeout):
                self.close_connection = True  # a silent client: drop it, free the thread

        def _host_ok(self) -> bool:
            if host_allowed(self.headers.get("Host")):
                return True
            self._json(403, {"error": "this server answers only to Host localhost or 127.0.0.1"})
            return False

        def log_message(self, fmt: str, *args) -> None:  # quiet: no per-request lines
            pass

        def _send(self, code: int, body: str, ctype: str) -> None:
            data = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(data)

        def _json(self, code: int, obj: dict) -> None:
            self._send(code, json.dumps(obj), "application/json")

        def do_GET(self) -> None:  # noqa: N802
            if not self._host_ok():
                return
            path = self.path.split("?", 1)[0]
            if path == "/":
                self._send(200, RATE_PAGE, "text/html; charset=utf-8")
            elif path == "/api/next":
                self._json(200, app.next_pair())
            elif path == "/results":
                self._send(200, results_page(app.store, ", ".join(map(str, app.samples_paths))), "text/html; charset=utf-8")
            elif path == "/api/results":
                self._json(200, {"count": app.store.count(), "win_rates": [
                    {"method": w.method, "win_rate": w.win_rate, "wins": w.wins, "ties": w.ties,
                     "losses": w.losses, "comparisons": w.comparisons} for w in app.store.win_rates()]})
            elif path == "/favicon.ico":
                self.send_response(204)
                self.end_headers()
            else:
                self._json(404, {"error": f"no such page: {path}"})

        def do_POST(self) -> None:  # noqa: N802
            if not self._host_ok():
                return
            if self.path != "/api/choice":
                return self._json(404, {"error": f"no such endpoint: {self.path}"})
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                return self._json(415, {"error": "send JSON (Content-Type: application/json)"})
            try:
                n = int(self.headers.get("Content-Length", "0"))
                if not 0 < n <= MAX_BODY:
                    raise ValueError("bad Content-Length")
                data = self.rfile.read(n)
                if len(data) < n:
                    raise ValueError("body shorter than its Content-Length")
                body = json.loads(data)
                if not isinstance(body, dict):
                    raise ValueError("expected a JSON object {token, choice}")
                token, choice = str(body["token"]), str(body["choice"])
                row = app.choose(token, choice)
            except (TimeoutError, socket.timeout):
                self.close_connection = True
                return self._json(408, {"error": f"request body not received within {timeout:g} s"})
            except RecursionError:
                return self._json(400, {"error": "bad request: JSON nested too deeply"})
            except (ValueError, KeyError, TypeError) as e:
                return self._json(400, {"error": f"bad request: {e}"})
            if row is None:
                return self._json(409, {"error": "unknown or already used token"})
            self._json(200, {"ok": True, "id": row, "rated": app.store.count()})

    return Handler


def make_server(samples_path: str | Path | list[str | Path], db_path: str | Path, port: int = 8765,
                seed: int | None = None, timeout: float | None = None) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:``port`` (0 = any free port); call ``serve_forever()`` on it.

    ``timeout``: seconds a connection may send nothing before it is closed (default ``TIMEOUT_S``)."""
    app = RatingApp(samples_path, db_path, seed)
    server = ThreadingHTTPServer((HOST, port), _handler(app, TIMEOUT_S if timeout is None else timeout))
    server.daemon_threads = True
    server.app = app  # type: ignore[attr-defined]
    return server

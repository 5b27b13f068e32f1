"""`dlmlab rate DIR`: samples/pairs, SQLite store, win rates, HTTP API and a click in headless Chromium."""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.error
import urllib.request

import pytest

from browser_util import browser, console_errors  # noqa: F401
from dlmlab.cli.main import main
from dlmlab.rating import RatingStore, all_pairs, find_samples, load_samples
from dlmlab.rating.server import make_server

ROWS = [
    {"prompt": "Once upon", "method": "mdlm", "sample": "a time <b>there</b> was"},
    {"prompt": "Once upon", "method": "ar", "sample": "a hill"},
    {"prompt": "Once upon", "method": "prediff", "sample": "a midnight dreary"},
    {"prompt": "To be", "method": "mdlm", "sample": "or not"},
    {"prompt": "To be", "method": "ar", "sample": "or not to be"},
    {"prompt": "To be", "method": "ar", "sample": "or not to be"},  # exact duplicate: dropped
    {"prompt": "Alone", "method": "ar", "sample": "only one method: never paired"},
]


def write_samples(path, rows=ROWS):
    path.mkdir(parents=True, exist_ok=True)
    (path / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path / "samples.jsonl"


def test_pairs_are_same_prompt_different_methods(tmp_path):
    samples = load_samples(write_samples(tmp_path))
    assert len(samples) == 6
    pairs = all_pairs(samples)
    assert len(pairs) == 3 + 1  # C(3,2) for "Once upon", 1 for "To be"
    assert all(p.a.prompt == p.b.prompt and p.a.method != p.b.method for p in pairs)
    assert len({p.key for p in pairs}) == 4
    # the key does not depend on order
    from dlmlab.rating.samples import Pair

    assert Pair(pairs[0].b, pairs[0].a).key == pairs[0].key


@pytest.mark.parametrize("line, msg", [
    ("{not json", "line 2: not valid JSON"),
    ('{"prompt": "p", "sample": "s"}', "line 2: missing key 'method'"),
    ('{"prompt": "p", "method": 3, "sample": "s"}', "line 2: 'method' must be a string"),
    ('[1, 2]', "line 2: expected an object"),
])
def test_bad_samples_lines_are_named(tmp_path, line, msg):
    p = tmp_path / "samples.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=msg):
        load_samples(p)


def test_single_method_and_missing_file(tmp_path):
    p = write_samples(tmp_path / "one", [ROWS[1], ROWS[4]])
    with pytest.raises(ValueError, match="two different methods"):
        all_pairs(load_samples(p))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no samples.jsonl"):
        find_samples(tmp_path / "empty")
    assert find_samples(tmp_path / "one") == p
    write_samples(tmp_path / "all" / "prediff")
    assert find_samples(tmp_path / "all") == tmp_path / "all" / "prediff" / "samples.jsonl"


def test_store_win_rates(tmp_path):
    samples = load_samples(write_samples(tmp_path))
    pairs = {tuple(sorted((p.a.method, p.b.method))) + (p.prompt,): p for p in all_pairs(samples)}
    store = RatingStore(tmp_path / "r.sqlite")
    p = pairs[("ar", "mdlm", "Once upon")]
    ar, md = (p.a, p.b) if p.a.method == "ar" else (p.b, p.a)
    store.record(p, ar, md, "left")                     # ar beats mdlm
    t = pairs[("ar", "mdlm", "To be")]
    store.record(t, t.a, t.b, "tie")
    with pytest.raises(ValueError, match="do not belong to this pair"):
        store.record(t, p.a, p.b, "tie")
    q = pairs[("mdlm", "prediff", "Once upon")]
    store.record(q, q.a, q.b, "right" if q.b.method == "prediff" else "left")  # prediff beats mdlm
    with pytest.raises(ValueError, match="choice must be"):
        store.record(q, q.a, q.b, "both")
    rates = {w.method: w for w in store.win_rates()}
    assert (rates["prediff"].wins, rates["prediff"].comparisons, rates["prediff"].win_rate) == (1, 1, 1.0)
    assert (rates["ar"].wins, rates["ar"].ties, rates["ar"].win_rate) == (1, 1, 0.75)
    assert (rates["mdlm"].losses, rates["mdlm"].ties, rates["mdlm"].win_rate) == (2, 1, pytest.approx(1 / 6))
    lo, hi = rates["ar"].ci95
    # Wilson's interval: the two rates q whose score test just passes at 95%, the roots of n (p - q)^2 = z^2 q (1 - q)
    # (here p = 0.75 from n = 2 comparisons, z = 1.96; neither root is clipped to [0, 1])
    assert lo < 0.75 < hi
    for q in (lo, hi):
        assert 2 * (0.75 - q) ** 2 == pytest.approx(1.96 ** 2 * q * (1 - q), abs=1e-12)
    assert [w.method for w in store.win_rates()] == ["prediff", "ar", "mdlm"]
    assert store.head_to_head()[("ar", "mdlm")] == (1, 1, 0)


def test_bad_db_file_is_a_clear_error(tmp_path):
    (tmp_path / "x.sqlite").write_text("this is not sqlite" * 100)
    with pytest.raises(ValueError, match="not a usable SQLite"):
        RatingStore(tmp_path / "x.sqlite")


@pytest.fixture
def server(tmp_path):
    write_samples(tmp_path)
    srv = make_server(tmp_path / "samples.jsonl", tmp_path / "ratings.sqlite", port=0, seed=0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    t.join(timeout=5)


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def _post(url, obj, ctype="application/json"):
    req = urllib.request.Request(url, data=json.dumps(obj).encode(), headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_api_rates_every_pair_once(server):
    srv, base = server
    assert srv.server_address[0] == "127.0.0.1"
    status, page = _get(base + "/")
    assert status == 200 and "Which continuation is better?" in page
    seen = set()
    for i in range(4):
        d = json.loads(_get(base + "/api/next")[1])
        assert not d["done"] and d["rated"] == i and d["total"] == 4
        assert "method" not in json.dumps(d) and "mdlm" not in json.dumps(d)  # anonymised
        seen.add((d["prompt"], frozenset([d["left"], d["right"]])))
        code, r = _post(base + "/api/choice", {"token": d["token"], "choice": "left"})
        assert code == 200 and r["rated"] == i + 1
        assert _post(base + "/api/choice", {"token": d["token"], "choice": "left"})[0] == 409  # used
    assert len(seen) == 4
    assert json.loads(_get(base + "/api/next")[1]) == {"done": True, "rated": 4, "total": 4}
    assert _post(base + "/api/choice", {"token": "x", "choice": "maybe"})[0] == 400
    assert _post(base + "/api/choice", {"token": "x", "choice": "left"}, ctype="text/plain")[0] == 415
    res = json.loads(_get(base + "/api/results")[1])
    assert res["count"] == 4 and sum(w["comparisons"] for w in res["win_rates"]) == 8
    assert "win-rates" in _get(base + "/results")[1]


def test_rate_page_click_in_chromium(server, browser):  # noqa: F811
    srv, base = server
    page = browser.new_page()
    errors = console_errors(page)
    page.goto(base + "/", wait_until="load", timeout=30_000)
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    prompt = page.locator("#prompt").text_content()
    left = page.locator("#left").text_content()
    right = page.locator("#right").text_content()
    assert prompt in {"Once upon", "To be"} and left and right and left != right
    assert "<b>" not in page.locator("#left").inner_html() or "&lt;b&gt;" in page.locator("#left").inner_html()
    page.click("#choose-right")
    page.wait_for_function("document.getElementById('progress').textContent.startsWith('1 of 4')", timeout=15_000)

    con = sqlite3.connect(srv.app.store.path)
    rows = con.execute("SELECT prompt, left_sample, right_sample, choice, winner, right_method FROM choices").fetchall()
    con.close()
    assert len(rows) == 1
    p, ls, rs, choice, winner, right_method = rows[0]
    assert (p, ls, rs, choice) == (prompt, left, right, "right") and winner == right_method
    rates = {w.method: w for w in srv.app.store.win_rates()}
    assert rates[winner].win_rate == 1.0 and rates[winner].wins == 1
    assert sum(w.comparisons for w in rates.values()) == 2

    page.keyboard.press("ArrowDown")  # tie by keyboard
    page.wait_for_function("document.getElementById('progress').textContent.startsWith('2 of 4')", timeout=15_000)
    page.goto(base + "/results", wait_until="load", timeout=30_000)
    assert page.locator("#win-rates tbody tr").count() >= 2
    assert errors == []
    page.close()


def test_cli_report(tmp_path, capsys):
    samples = load_samples(write_samples(tmp_path))
    assert main(["rate", str(tmp_path), "--report"]) == 2
    assert "no ratings database" in capsys.readouterr().err
    store = RatingStore(tmp_path / "ratings.sqlite")
    p = all_pairs(samples)[0]
    store.record(p, p.a, p.b, "left")
    assert main(["rate", str(tmp_path), "--report"]) == 0
    out = capsys.readouterr().out
    assert "win rate" in out and p.a.method in out and "1.000" in out and "0.000" in out
    assert f"{p.a.method} vs {p.b.method}" in out or f"{p.b.method} vs {p.a.method}" in out
    assert main(["rate", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_serves_on_localhost_and_stops_on_ctrl_c(tmp_path):
    import os
    import re
    import signal
    import subprocess
    import sys

    write_samples(tmp_path)
    # a shell's background job (e.g. a CI script started with &) inherits SIGINT ignored, and Python then installs
    # no KeyboardInterrupt handler: give the child the default disposition a terminal's Ctrl-C meets
    proc = subprocess.Popen([sys.executable, "-m", "dlmlab.cli.main", "rate", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = []
        for _ in range(5):  # the URL is the third line
            lines.append(proc.stdout.readline())
            m = re.search(r"open (http://127\.0\.0\.1:\d+/)", lines[-1])
            if m:
                break
        assert m, lines
        assert "rating 4 pairs" in lines[0]
        status, page = _get(m.group(1))
        assert status == 200 and "choose-left" in page
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)  # generous: a loaded 2-core CI machine can be slow to start Python
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 0
    assert "no choices stored" in out


# --- hardening (issue 13, defect 9) ------------------------------------------------------------------
def _raw(base, method, path, body=b"", headers=None, timeout=10):
    """(status, parsed JSON body) of a request sent with http.client, whose headers we fully control."""
    import http.client
    from urllib.parse import urlparse

    u = urlparse(base)
    con = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        con.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            con.putheader(k, v)
        con.endheaders(body or None)
        r = con.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        con.close()


def test_deeply_nested_json_is_a_400_not_a_dropped_connection(server):
    srv, base = server
    host = f"127.0.0.1:{srv.server_address[1]}"
    body = b"[" * 32768 + b"]" * 32768  # 64 KB of nested brackets
    status, reply = _raw(base, "POST", "/api/choice", body,
                         {"Host": host, "Content-Type": "application/json", "Content-Length": str(len(body))})
    assert status == 400 and "nested too deeply" in reply["error"]
    # the server still answers
    assert json.loads(_get(base + "/api/next")[1])["total"] == 4


def test_a_body_shorter_than_its_content_length_times_out(tmp_path, monkeypatch):
    import socket
    import time

    import dlmlab.rating.server as server_mod

    monkeypatch.setattr(server_mod, "TIMEOUT_S", 1.0, raising=False)
    write_samples(tmp_path)
    srv = make_server(tmp_path / "samples.jsonl", tmp_path / "ratings.sqlite", port=0, seed=0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = srv.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
            t0 = time.monotonic()
            s.sendall(f"POST /api/choice HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: 1000\r\n\r\n{{\"token\": ".encode())
            reply = s.recv(4096).decode(errors="replace")  # blocks until the server answers or closes
            waited = time.monotonic() - t0
        assert waited < 10, f"the server held the connection for {waited:.1f} s"
        assert reply == "" or reply.startswith("HTTP/1.0 408") or reply.startswith("HTTP/1.1 408"), reply
        # a stalled client holds no thread forever: the server goes on answering
        assert json.loads(_get(f"http://127.0.0.1:{port}/api/next")[1])["total"] == 4
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


@pytest.mark.parametrize("host, ok", [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("localhost", True), ("LOCALHOST:9000", True),
    ("evil.example", False), ("evil.example:{port}", False), ("127.0.0.1.evil.example:{port}", False),
    ("", False),
])
def test_only_localhost_host_headers_are_answered(server, host, ok):
    srv, base = server
    headers = {"Host": host.format(port=srv.server_address[1])} if host else {}
    status, reply = _raw(base, "GET", "/api/next", headers=headers)
    if ok:
        assert status == 200 and reply["total"] == 4
    else:
        assert status == 403 and "localhost" in reply["error"]
    status, _ = _raw(base, "POST", "/api/choice", b'{"token": "x", "choice": "left"}',
                     {**headers, "Content-Type": "application/json", "Content-Length": "32"})
    assert status == (409 if ok else 403)

"""Headless Debian Chromium for the browser tests (never downloads a browser).

Import the ``browser`` fixture into a test module: ``from browser_util import browser  # noqa: F401``.
"""

from __future__ import annotations

import os

import pytest

CHROMIUM = os.environ.get("DLMLAB_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not found: install Debian chromium (`make browser`) to run the browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


def console_errors(page) -> list[str]:
    """Start collecting console errors and page errors of ``page``; returns the (live) list."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors

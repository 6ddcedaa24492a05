"""Debian's headless Chromium through Playwright (which never downloads a browser here)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}  # a phone's screen


@contextmanager
def chromium(env: dict) -> Iterator:
    """A launched browser; it is closed when the block ends."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Debian's chromium is missing at {CHROMIUM}; run `bash scripts/install.sh --test` to install it.")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=dict(env, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
        )
        try:
            yield browser
        finally:
            browser.close()

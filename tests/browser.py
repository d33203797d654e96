"""Headless Chromium from Debian's packages, driven by Playwright."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# CI installs the browser (make test): there a missing one must fail, not skip.
needs_chromium = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None and not os.environ.get("CI"),
    reason="chromium is not installed (make test installs it)",
)

"""Headless Chromium from Debian's packages, driven by Playwright."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT_DIR = Path(__file__).resolve().parent.parent
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


# axe-core from the npm registry (make axe installs tests/js's lock file).
AXE = ROOT_DIR / "tests" / "js" / "node_modules" / "axe-core" / "axe.min.js"
needs_axe = pytest.mark.skipif(
    not AXE.exists() and not os.environ.get("CI"),
    reason="axe-core is not installed (make axe, or make test, installs it)",
)
# What fails a page: the rules' own impact levels "serious" and "critical".
BLOCKING = ("serious", "critical")

_AXE_RUN = """async () => {
  const result = await axe.run(document, { resultTypes: ["violations"] });
  return result.violations.map((v) => ({
    id: v.id,
    impact: v.impact,
    help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")),
  }));
}"""


def axe_violations(page, impacts=BLOCKING):
    """Run axe-core on the page as it stands; return its violations of ``impacts``."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE))
    return [v for v in page.evaluate(_AXE_RUN) if v["impact"] in impacts]


# The sum of the page's unexpected layout shifts so far (Cumulative Layout Shift as
# the browser reports it, without the session windows: an upper bound of it).
LAYOUT_SHIFT = """() => new Promise((resolve) => {
  let total = 0;
  new PerformanceObserver((list) => {
    for (const shift of list.getEntries()) {
      if (!shift.hadRecentInput) total += shift.value;
    }
  }).observe({ type: "layout-shift", buffered: true });
  setTimeout(() => resolve(total), 100);
})"""

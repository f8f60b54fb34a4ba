"""Browser fixtures: Debian's Chromium driven by Playwright."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

CHROMIUM_ARGS = [
    "--no-sandbox",  # the suite runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Playwright's assertions wait 5 s by default, apart from the page's own 60 s for actions. Beside
# the parallel suite on two cores a page's first fetch alone can take longer than that (a kiosk's
# battle start did, in CI), so assertions get the same patience as actions; a wrong value still
# fails, only later.
EXPECT_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    # Playwright's sync API keeps an event loop running in this thread; the tests' own ORM
    # calls are still plain synchronous ones, so Django's guard against them is lifted here.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        expect.set_options(timeout=EXPECT_TIMEOUT_MS)
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()

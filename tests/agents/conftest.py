"""The agents' tests share the browser fixture of tests/frontend: the harness's e2e test
watches the organizer's live page in Chromium while the agent works."""

from tests.frontend.conftest import browser  # noqa: F401

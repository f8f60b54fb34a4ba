"""An organizer watches an agent live in a real browser: a tool call the agent's harness reports
while the page is open appears within seconds, and its hostile output is shown as text."""

from __future__ import annotations

import time
from decimal import Decimal

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import expect

from agents.services import agent_create, token_issue
from agents.trajectory import tool_call_record

pytestmark = pytest.mark.slow

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">"


def test_a_new_event_reaches_the_open_live_page_and_agent_text_stays_text(arena, browser):
    ann = agent_create(name="ann", credit_limit=Decimal("300"))
    token = token_issue(agent=ann, kind="api")
    tool_call_record(agent=ann, report={"command": "cat notes.html", "output": HOSTILE})
    organizer = Client()
    organizer.force_login(User.objects.create_user("org", password="x", is_staff=True))

    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": organizer.cookies["sessionid"].value, "url": arena.url}]
    )
    page = context.new_page()
    page.goto(f"{arena.url}/organizer/agents/ann/live")
    expect(page.locator("#connection")).to_have_text("live")
    title = page.title()
    first = page.locator("article.event").first
    expect(first.locator("pre").nth(1)).to_have_text(HOSTILE)  # the output, as characters
    expect(page.locator("#events img")).to_have_count(0)
    expect(page.locator("#bars .bar")).to_have_count(2)  # API and scaffold credit

    # The agent's harness reports a tool call through the agent API, as it would from its sandbox.
    reported = httpx.post(
        f"{arena.url}/api/v1/trajectory/events",
        headers={"Authorization": f"Bearer {token}"},
        json={"command": "python train.py --lr 1e-5", "output": f"loss 1.2 {HOSTILE}",
              "exit_code": 0, "duration_s": 12.5},
        timeout=30,
    )  # fmt: skip
    assert reported.status_code == 201, reported.text
    recorded_at = time.monotonic()

    new = page.locator("article.kind-tool_call", has_text="python train.py --lr 1e-5")
    expect(new).to_have_count(1, timeout=3000)
    latency = time.monotonic() - recorded_at
    print(f"[livestream] reported tool call on the open page after {latency:.2f} s")
    expect(new.locator("pre").nth(1)).to_have_text(f"loss 1.2 {HOSTILE}")
    expect(new).to_contain_text("reported")
    expect(new).to_contain_text("12.5 s")
    # The API call that carried it was observed by the platform and is on the page too, above.
    expect(
        page.locator("article.kind-api_call", has_text="/api/v1/trajectory/events")
    ).to_have_count(1, timeout=3000)
    expect(page.locator("#events img")).to_have_count(0)
    assert page.title() == title, "agent text ran as a script"
    context.close()

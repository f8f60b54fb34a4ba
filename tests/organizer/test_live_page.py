"""An agent's livestream pages: the organizer's (staff only, the latest events, paging back,
catching up), the public's (404 while off, never an event younger than the delay, no money),
the index of agents, and the gateway port that serves none of them."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents.models import Agent, TrajectoryEvent
from agents.trajectory import ReplyCollector, model_call_record, tool_call_record
from agents.trajectory_live import PAGE_EVENTS
from arena.competition.models import Competition, CompetitionAgent
from tests.organizer import builders

pytestmark = pytest.mark.django_db

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("org", password="x", is_staff=True))
    return client


@pytest.fixture
def ann() -> Agent:
    return builders.agent("ann", gpu_hours=100, credit=300)


def initial_of(response) -> dict:
    """The page's data island, as the page's script reads it."""
    html = response.content.decode()
    start = html.index('<script id="live-initial" type="application/json">') + len(
        '<script id="live-initial" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def tool_call(agent: Agent, command: str, output: str = "ok") -> TrajectoryEvent:
    report = {"command": command, "output": output, "exit_code": 0, "duration_s": 0.5}
    return tool_call_record(agent=agent, report=report)


def event_at(agent: Agent, when: dt.datetime, command: str) -> TrajectoryEvent:
    """An event recorded at `when` (rows cannot be changed afterwards: the table is
    append-only, so the past is written as it would have been)."""
    payload = {"tool": "shell", "command": command, "output": "", "exit_code": 0}
    return TrajectoryEvent.objects.create(
        agent=agent, kind="tool_call", reported=True, payload=payload, size=100, created_at=when
    )


def public(agent: Agent, delay_minutes: int | None) -> Competition:
    competition = Competition.objects.create(
        name=f"c-{agent.name}", base_model="/m/base", live_public_delay_minutes=delay_minutes
    )
    CompetitionAgent.objects.create(competition=competition, name=agent.name)
    return competition


# -- the organizer's page --------------------------------------------------------------------


def test_the_live_page_is_for_staff_only(ann):
    anonymous = Client().get("/organizer/agents/ann/live")
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    voter = Client()
    voter.force_login(User.objects.create_user("voter", password="x"))
    assert voter.get("/organizer/agents/ann/live").status_code == 403
    assert voter.get("/organizer/agents/ann/live/events").status_code == 403
    assert voter.get("/organizer/agents/").status_code == 403


def test_the_page_shows_each_kind_of_event_with_its_content_as_escaped_data(staff, ann):
    tool_call(ann, "ls -la /data", output=HOSTILE)
    reply = ReplyCollector()
    reply.add_completion({"choices": [{"message": {"content": "Next I train."}}]})
    model_call_record(
        agent=ann, model="gpt-test", request_body=json.dumps(
            {"messages": [{"role": "user", "content": "what next?"}]}
        ).encode(), reply=reply, status=200, prompt_tokens=12, completion_tokens=4,
        cost_usd=Decimal("0.0031"), latency_ms=250,
    )  # fmt: skip

    response = staff.get("/organizer/agents/ann/live")

    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>document.title" not in html, "agent text reached the page as markup"
    tool, model = initial_of(response)["events"]
    assert (tool["kind"], tool["reported"], tool["command"]) == ("tool_call", True, "ls -la /data")
    assert tool["output"] == HOSTILE and tool["exit_code"] == 0 and tool["duration_s"] == 0.5
    assert (model["kind"], model["reported"], model["model"]) == ("model_call", False, "gpt-test")
    assert model["last_message"] == {"role": "user", "content": "what next?"}
    assert model["reply"] == "Next I train."
    assert (model["prompt_tokens"], model["completion_tokens"], model["cost_usd"]) == (
        12, 4, "0.0031",
    )  # fmt: skip


def test_the_page_carries_the_budget_bars_and_the_journal(staff, ann):
    from agents.journal import journal_add

    Agent.objects.filter(pk=ann.pk).update(
        credit_spent=Decimal("75"), scaffold_credit_limit=Decimal("50"),
        scaffold_credit_spent=Decimal("10"),
    )  # fmt: skip
    journal_add(agent=ann, text=f"Hypothesis: shorter answers win. {HOSTILE}", kind="hypothesis")

    initial = initial_of(staff.get("/organizer/agents/ann/live"))

    bars = {bar["key"]: bar for bar in initial["budget"]}
    assert list(bars) == ["gpu_hours", "api_credit", "scaffold_credit", "storage"]
    assert (bars["api_credit"]["used"], bars["api_credit"]["limit"]) == (75, 300)
    assert bars["scaffold_credit"]["fraction"] == 0.2
    assert (bars["storage"]["used"], bars["storage"]["limit"]) == (100, 400)
    assert bars["gpu_hours"]["limit"] == 100
    assert initial["journal"][0]["kind"] == "hypothesis"
    assert initial["journal"][0]["text"].endswith(HOSTILE)


def test_a_long_trajectory_sends_one_page_and_pages_back_and_forward_by_id(staff, ann):
    events = [tool_call(ann, f"step {n}") for n in range(PAGE_EVENTS + 30)]

    initial = initial_of(staff.get("/organizer/agents/ann/live"))
    shown = [event["id"] for event in initial["events"]]
    assert shown == [event.pk for event in events[-PAGE_EVENTS:]]

    older = staff.get(f"/organizer/agents/ann/live/events?before={shown[0]}").json()
    assert [e["command"] for e in older["events"]] == [f"step {n}" for n in range(30)]
    assert older["more"] is False

    newer = staff.get(f"/organizer/agents/ann/live/events?after={events[-3].pk}").json()
    assert [e["id"] for e in newer["events"]] == [events[-2].pk, events[-1].pk]
    bad = staff.get("/organizer/agents/ann/live/events?after=-1")
    assert bad.status_code == 400 and bad.json()["code"] == "bad_id"


def test_the_index_lists_every_agent_with_its_live_page_and_the_dashboard_links_it(staff, ann):
    builders.agent("bob")
    public(ann, 30)

    html = staff.get("/organizer/agents/").content.decode()

    assert (
        'href="/organizer/agents/ann/live"' in html and 'href="/organizer/agents/bob/live"' in html
    )
    assert 'href="/live/agents/ann"' in html and "30 min late" in html
    assert 'href="/live/agents/bob"' not in html
    dashboard = staff.get("/organizer/agents/").content.decode()
    assert 'href="/organizer/agents/"' in dashboard
    assert 'href="/organizer/agents/ann/live"' in dashboard  # each budget row names its page


def test_the_staff_page_carries_the_organizer_navigation_and_the_public_one_does_not(staff, ann):
    public(ann, 0)

    staff_page = staff.get("/organizer/agents/ann/live").content.decode()
    public_page = Client().get("/live/agents/ann").content.decode()

    assert 'class="organizer-nav"' in staff_page
    assert 'href="/organizer/agents/ann/" aria-current="page"' in staff_page
    assert 'href="/organizer/cluster/?agent=ann#jobs"' in staff_page
    assert "organizer-nav" not in public_page and 'href="/organizer/agents' not in public_page


def test_an_unknown_agent_is_404(staff):
    assert staff.get("/organizer/agents/nobody/live").status_code == 404


# -- the public, delayed view ----------------------------------------------------------------


def test_the_public_view_is_404_while_the_competition_has_it_off(ann):
    tool_call(ann, "ls")
    assert Client().get("/live/agents/ann").status_code == 404  # in no competition
    public(ann, None)
    assert Client().get("/live/agents/ann").status_code == 404
    assert Client().get("/live/agents/ann/events").status_code == 404


def test_an_agent_two_competitions_field_is_public_only_if_both_say_so(ann):
    public(ann, 10)
    other = Competition.objects.create(name="other", base_model="/m")
    CompetitionAgent.objects.create(competition=other, name="ann")
    assert Client().get("/live/agents/ann").status_code == 404
    Competition.objects.filter(pk=other.pk).update(live_public_delay_minutes=45)
    assert Client().get("/live/agents/ann").status_code == 200


def test_the_public_view_never_shows_an_event_younger_than_the_delay(ann):
    public(ann, 30)
    now = timezone.now()
    old = event_at(ann, now - dt.timedelta(minutes=40), "old enough")
    event_at(ann, now - dt.timedelta(minutes=20), "too fresh")
    tool_call(ann, "just now")

    response = Client().get("/live/agents/ann")

    assert response.status_code == 200
    initial = initial_of(response)
    assert [e["command"] for e in initial["events"]] == ["old enough"]
    assert initial["delay_minutes"] == 30 and initial["public"] is True
    assert initial["socket"] == "/ws/live/agents/ann/"
    caught_up = Client().get(f"/live/agents/ann/events?after={old.pk}").json()
    assert caught_up == {"events": [], "more": False}
    latest = Client().get("/live/agents/ann/events").json()
    assert [e["command"] for e in latest["events"]] == ["old enough"]
    back = Client().get("/live/agents/ann/events?before=999999999").json()
    assert [e["command"] for e in back["events"]] == ["old enough"]


def test_the_public_view_shows_no_budget_and_no_cost(ann):
    public(ann, 0)
    reply = ReplyCollector()
    model_call_record(
        agent=ann, model="m", request_body=b"{}", reply=reply, status=200, prompt_tokens=1,
        completion_tokens=1, cost_usd=Decimal("1.25"), latency_ms=1,
    )  # fmt: skip

    response = Client().get("/live/agents/ann")

    initial = initial_of(response)
    assert initial["budget"] == [] and 'id="bars"' not in response.content.decode()
    assert [e["kind"] for e in initial["events"]] == ["model_call"]
    assert "cost_usd" not in initial["events"][0]
    assert "1.25" not in response.content.decode()


def test_the_journal_beside_the_public_view_is_delayed_too(ann):
    from agents.models import JournalEntry

    public(ann, 30)
    JournalEntry.objects.create(
        agent=ann,
        kind="note",
        text="an old note",
        created_at=timezone.now() - dt.timedelta(hours=1),
    )
    JournalEntry.objects.create(agent=ann, kind="note", text="a fresh note")

    initial = initial_of(Client().get("/live/agents/ann"))

    assert [entry["text"] for entry in initial["journal"]] == ["an old note"]


def test_the_agents_gateway_port_serves_no_live_page(settings, staff, ann):
    public(ann, 0)
    gateway = {"SERVER_PORT": str(settings.AGENTS_GATEWAY_PORT)}
    assert Client().get("/live/agents/ann", **gateway).status_code == 404
    assert Client().get("/live/agents/ann/events", **gateway).status_code == 404
    assert staff.get("/organizer/agents/ann/live", **gateway).status_code == 404
    assert Client().get("/live/agents/ann").status_code == 200

"""Issue 25, items 3 and 11: the model card is the agent's text, and two readers of it trusted
it. A card's YAML front matter with nested aliases (a "billion laughs" of 700 bytes) was parsed
whole in the web worker that serves voters and expanded when written out; now anchors and
aliases are refused, and only the known fields are kept, typed and bounded. The card's body was
rendered as Markdown on the organizer's agent page, so the agent's links, images and headings
became the page's; now it shows as the text the agent wrote, as the daily report shows agent
text.

The agent plays both from its sandbox, as its own Unix user, with its own `arena-agent` CLI
against the live site."""

from __future__ import annotations

import re
import subprocess

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Nomination
from cluster.models import ClusterAccount
from tests import factories
from tests.evalsuite.on_demand_builders import checkpoint_of
from tests.security.conftest import Player, bounded

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FIELDS = factories.MODEL_CARD.split("---\n")[1]


def alias_bomb(levels: int) -> str:
    """Front matter whose last field names 9**levels strings through nested aliases. Six
    levels write out as 13.6 MB of JSON, nine (about 700 bytes of card) as 13 GB; six keep the
    test quick on the code that expanded it, which is what it shows."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "---\n" + FIELDS + "\n".join(lines) + "\n---\n# laughs\n"


@pytest.fixture
def ann(players, arena, settings) -> Player:
    settings.AGENTS_ARENA_URL = arena.url
    player = players("sec_card")
    factories.running_phase()
    return player


def nominate_as(player: Player, card: str) -> subprocess.CompletedProcess[str]:
    """The agent writes `card` in its sandbox and nominates a checkpoint of its own with it."""
    agent = player.provisioned.agent
    checkpoint = checkpoint_of(agent, ClusterAccount.objects.get(pk=agent.cluster_account_id))
    done = player.shell(f"cat > card.md <<'CARD'\n{card}CARD\n")
    assert done.returncode == 0, done.stderr
    return player.shell(
        f"/usr/bin/python3 .arena/bin/arena-agent nominate {checkpoint.pk} --card card.md"
    )


def organizer_page(player: Player) -> str:
    staff = Client()
    staff.force_login(User.objects.create_user("organizer", password="x", is_staff=True))
    reply = staff.get(f"/organizer/agents/{player.provisioned.agent.name}/")
    assert reply.status_code == 200
    return reply.content.decode()


def test_a_card_with_nested_aliases_is_refused_and_the_organizer_page_renders(ann):
    with bounded(seconds=60, memory_mib=512):
        done = nominate_as(ann, alias_bomb(levels=6))
        page = organizer_page(ann)

    assert done.returncode != 0
    assert "may not use YAML anchors or aliases" in done.stderr
    assert not Nomination.objects.filter(agent=ann.provisioned.agent).exists()
    assert "No nominations yet." in page and "lol" not in page


def test_the_organizer_sees_the_cards_links_images_and_headings_as_text(ann):
    body = (
        "# Vote for me\n\n"
        "See [my results](https://agent.example/phish) and <https://agent.example/auto>.\n\n"
        "![tracker](https://agent.example/pixel.png)\n\n"
        "## Details\n\nPlain words stay.\n"
    )
    done = nominate_as(ann, "---\n" + FIELDS + "---\n" + body)
    assert done.returncode == 0, done.stderr

    page = organizer_page(ann)
    card = re.search(r'<div class="card">(.*?)</div>', page, re.S)
    assert card is not None, "the card is on the page"
    shown = card.group(1)
    assert "agent.example" in shown and "Plain words stay." in shown  # the text, as written
    assert not re.search(r"<(a|img|h[1-6])\b", shown), shown
    assert "agent.example" not in page.replace(shown, "")  # nowhere else either

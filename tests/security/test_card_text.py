"""Review of issue 25: a model card's text PostgreSQL cannot store. A NUL or a lone surrogate in
a front matter field (YAML's `"\\0"` and `"\\ud800"` escapes) or in the card itself passed the
card's reader, and PostgreSQL then refused the nomination's row: the agent got a 500 where it
should be told what is wrong. Now the reader refuses them, and the agent gets a 400.

The agent nominates through the agent API with its own token (Django's client on the real
route)."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Nomination
from agents.services import token_issue
from tests import factories
from tests.evalsuite.on_demand_builders import checkpoint_of, provisioned

pytestmark = pytest.mark.django_db

FIELDS = factories.MODEL_CARD.split("---\n")[1]


@pytest.mark.parametrize(
    "card",
    [
        pytest.param("---\n" + FIELDS + 'base_model: "a\\0b"\n---\n# card\n', id="yaml-nul"),
        pytest.param(
            "---\n" + FIELDS + 'base_model: "\\ud800"\n---\n# card\n', id="yaml-surrogate"
        ),
        pytest.param("---\n" + FIELDS + 'jobs: ["x\\0"]\n---\n# card\n', id="yaml-nul-in-list"),
        pytest.param("---\n" + FIELDS + "---\n# card\x00 text\n", id="body-nul"),
        pytest.param("---\n" + FIELDS + "---\n# card \ud800 text\n", id="body-surrogate"),
    ],
)
def test_a_card_with_text_postgres_cannot_store_is_refused_with_a_reason(card, tmp_path):
    agent, account = provisioned("cardtext", tmp_path)
    factories.running_phase()
    checkpoint = checkpoint_of(agent, account)
    client = Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind='api')}"})

    reply = client.post(
        "/api/v1/nomination",
        {"checkpoint": checkpoint.pk, "model_card": card},
        content_type="application/json",
    )

    assert reply.status_code == 400, reply.content[:300]
    assert "NUL character or a lone surrogate" in reply.json()["error"]["message"]
    assert not Nomination.objects.filter(agent=agent).exists()

"""`{% organizer_nav "cluster" %}`: the organizer pages' one navigation bar, the current page
marked, with a link to each agent's own page so any of them is one click away."""

from __future__ import annotations

from typing import Any

from django import template

from agents.selectors import agents_in_order

register = template.Library()

# (URL name, label) in the bar's order; the page's `nav` key is its URL name's last word.
PAGES = [
    ("organizer", "phases", "Phases"),
    ("organizer-agents", "agents", "Agents"),
    ("organizer-cluster", "cluster", "Cluster"),
    ("organizer-evaluation", "evaluation", "Evaluation"),
    ("organizer-audit", "audit", "Audit"),
    ("organizer-voters", "voters", "Voters"),
]


@register.inclusion_tag("organizer/nav.html")
def organizer_nav(current: str = "", agent: str = "") -> dict[str, Any]:
    """`current`: the page's key in `PAGES`; `agent`: the agent whose page this is, if any."""
    return {
        "pages": [
            {"url": url, "label": label, "current": key == current} for url, key, label in PAGES
        ],
        "agents": [
            {"name": each.name, "current": each.name == agent} for each in agents_in_order()
        ],
    }

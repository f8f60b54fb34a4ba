"""Django admin: every model of the platform's apps is there, and ledgers are read-only."""

from __future__ import annotations

import datetime as dt

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from arena.battles.models import Battle, TargetedRound, Vote
from cluster.models import GpuLedger, Job
from tests import factories
from tests.organizer import builders

pytestmark = pytest.mark.django_db

APPS = ["competition", "serving", "battles", "leaderboard", "cluster", "agents"]
RECORDS = [
    "agents.proxycall",
    "agents.datarecord",
    "agents.checkpoint",
    "agents.nomination",
    "cluster.gpuledger",
    "cluster.job",
    "cluster.jobsegment",
    "battles.battle",
    "battles.answer",
    "battles.vote",
    "leaderboard.ratingsnapshot",
]


@pytest.fixture
def superuser() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


@pytest.fixture
def rows():
    now = timezone.now()
    phase = factories.running_phase()
    ann = builders.agent("ann")
    job = builders.job(ann, submitted=now, runs=[(now - dt.timedelta(hours=1), now)], gpus=2)
    builders.proxy_call(ann, at=now, cost="1.00")
    builders.data_record(ann, at=now)
    builders.nomination(ann, phase=phase, checkpoint=builders.checkpoint(ann, job=job, at=now))
    factories.round_robin_votes(("left", "right"), 2, lambda i: "a")


@pytest.mark.parametrize("app_label", APPS)
def test_every_model_is_in_the_admin(app_label):
    missing = [
        model.__name__
        for model in apps.get_app_config(app_label).get_models()
        if not admin.site.is_registered(model)
    ]
    assert missing == []


def test_every_list_and_change_page_opens(superuser, rows):
    for app_label in APPS:
        for model in apps.get_app_config(app_label).get_models():
            opts = model._meta
            listing = superuser.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
            assert listing.status_code == 200, opts.label
            first = model.objects.first()
            if first is not None:
                url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk])
                assert superuser.get(url).status_code == 200, opts.label


@pytest.mark.parametrize("label", RECORDS)
def test_ledgers_and_records_cannot_be_added_or_edited(superuser, rows, label):
    app_label, model_name = label.split(".")
    model = apps.get_model(app_label, model_name)
    if not model.objects.exists():
        factories.round_robin_votes(("x", "y"), 1, lambda i: "a")
    if label == "leaderboard.ratingsnapshot":
        from arena.leaderboard.services import phase_leaderboard_fit

        Battle.objects.update(phase="p")
        phase_leaderboard_fit(phase="p", bootstrap_rounds=5)
    first = model.objects.first()
    assert superuser.get(reverse(f"admin:{app_label}_{model_name}_add")).status_code == 403
    change = reverse(f"admin:{app_label}_{model_name}_change", args=[first.pk])
    assert superuser.post(change, {}).status_code == 403


def test_a_ledger_row_stays_as_charged(superuser, rows):
    ledger = GpuLedger.objects.get()
    url = reverse("admin:cluster_gpuledger_change", args=[ledger.pk])
    superuser.post(url, {"gpu_seconds": 0})
    assert GpuLedger.objects.get().gpu_seconds == 2 * 3600
    assert Job.objects.get().gpu_seconds_charged == 2 * 3600
    assert Vote.objects.count() == 2


def test_an_organizer_orders_a_targeted_round_through_the_service(superuser):
    a, b = factories.contestant("left"), factories.contestant("right")
    url = reverse("admin:battles_targetedround_add")
    base = {"contestant_a": a.pk, "battles_wanted": 5, "prompts": '["  Hi there "]', "note": "x"}

    same = superuser.post(url, {**base, "contestant_b": a.pk})
    assert same.status_code == 200 and b"two different contestants" in same.content
    assert superuser.post(url, {**base, "contestant_b": b.pk}).status_code == 302

    made = TargetedRound.objects.get()
    assert (made.contestant_a, made.contestant_b, made.battles_wanted) == (a, b, 5)
    assert made.prompts == ["Hi there"]  # cleaned by targeted_round_schedule

"""The organizer dashboard: staff only, and every section filled from real rows."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from arena.battles.models import Battle
from arena.competition.models import Phase
from arena.leaderboard.services import phase_leaderboard_fit
from cluster.backends import cluster_backend
from cluster.backends.base import AccountLimits, JobRequest
from cluster.models import ClusterAccount
from cluster.services import job_submit
from frontend.organizer import duration_words, provided_sections
from tests import factories
from tests.organizer import builders

pytestmark = pytest.mark.django_db

HOSTILE_CARD = builders.CARD.replace(
    "It stops at the end of its turn.",
    "<script>alert('card')</script> <img src=x onerror=alert(2)> "
    "[click me](javascript:alert(3)) and **bold** claims.",
)


@pytest.fixture(autouse=True)
def local_cluster(settings, tmp_path):
    """The dashboard reads the cluster live: here a local backend of the test's own."""
    settings.CLUSTER_BACKEND = "local"
    settings.VAR_DIR = tmp_path / "var"
    backend = cluster_backend()
    yield backend
    for account in ClusterAccount.objects.values_list("name", flat=True):
        backend.cancel_all(account=account)


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("org", password="x", is_staff=True))
    return client


@pytest.fixture
def competition():
    """Two agents mid-phase-1 (freezing in 2 h 10 min), phase 2 scheduled, votes fitted."""
    now = timezone.now()
    phase1 = factories.running_phase(label="phase-1")
    Phase.objects.filter(pk=phase1.pk).update(
        ends_at=now + dt.timedelta(hours=2, minutes=10, seconds=30)
    )
    Phase.objects.create(
        competition=phase1.competition, number=2, label="phase-2",
        starts_at=now + dt.timedelta(days=1, minutes=1), ends_at=now + dt.timedelta(days=4),
    )  # fmt: skip
    ann = builders.agent("ann", gpu_hours=100, credit=300)
    ben = builders.agent("ben", gpu_hours=50, credit=300)
    hour = now - dt.timedelta(hours=5)
    sft = builders.job(ann, submitted=hour, runs=[(hour, hour + dt.timedelta(hours=3))], gpus=8, name="ann-sft")  # fmt: skip
    builders.job(ben, submitted=hour, state="RUNNING", gpus=2, name="ben-dpo")
    builders.proxy_call(ann, at=now, cost="45.00")
    builders.nomination(ann, phase=phase1, checkpoint=builders.checkpoint(ann, job=sft, at=now), card=HOSTILE_CARD)  # fmt: skip
    factories.round_robin_votes(("ann-model", "ben-model", "tiny-instruct"), 12, lambda i: "a")
    Battle.objects.update(phase="phase-1")
    phase_leaderboard_fit(phase="phase-1", bootstrap_rounds=20)
    return ann, ben


def test_anonymous_visitors_are_sent_to_the_admin_login():
    reply = Client().get("/organizer/")
    assert reply.status_code == 302
    assert reply["Location"] == "/admin/login/?next=/organizer/"


def test_people_who_are_not_staff_are_refused():
    client = Client()
    client.force_login(User.objects.create_user("voter", password="x"))
    assert client.get("/organizer/").status_code == 403


def test_staff_see_every_section_with_real_rows(staff, competition):
    page = staff.get("/organizer/").content.decode()

    # Timeline: what happens next, and when.
    assert "phase-1 freezes in 2 h 10 min" in page
    assert "phase-2 starts in 1 d" in page
    # Budgets: used / limit with a bar.
    page = staff.get("/organizer/agents/").content.decode()
    assert "24.0 / 100 GPU-h (24%)" in page
    assert "$45.00 / $300.00 (15%)" in page
    assert page.count("<meter") == 2 * 6  # six per agent
    # Jobs, with state and GPU-hours.
    page = staff.get("/organizer/cluster/").content.decode()
    assert page.count('<tr id="node-') == 1 and "<meter" in page  # one per node
    assert "ann-sft" in page and "ben-dpo" in page and ">running<" in page
    # Nominations with their cards.
    page = staff.get("/organizer/agents/ann/").content.decode()
    assert "full SFT" in page and "ckpt-1" in page
    assert "**bold** claims" in page and "<strong>" not in page  # shown as written, not rendered
    # The leaderboard of phase 1, both fits; phase 2 has none yet.
    page = staff.get("/organizer/").content.decode()
    assert "Style-controlled" in page and "Raw" in page
    assert page.count("tiny-instruct") == 2 + 1  # both fits, and its row of identity leaks
    assert "Identity leaks" in page and "Leak rate" in page
    assert "No ratings for phase-2 yet" in page
    # Evaluation and audit: nothing provides a section yet.
    assert "Evaluation and audit" in page


def test_the_cluster_section_shows_each_node_the_queue_and_gpus_per_qos(
    staff, competition, local_cluster, tmp_path
):
    # The local cluster runs a job as its account's Unix user, which must exist: root here.
    ClusterAccount.objects.filter(name="acct_ann").update(unix_user="root")
    account = ClusterAccount.objects.get(name="acct_ann")
    local_cluster.account_apply(
        account=account.name, unix_user="root", limits=AccountLimits(100, 8, 8, 24)
    )

    def submit(name: str, gpus: int, *, preemptible: bool = False):
        request = JobRequest(
            name=name, script="sleep 60", nodes=1, gpus_per_node=gpus, time_limit_minutes=10,
            preemptible=preemptible, workdir=tmp_path,
        )  # fmt: skip
        return job_submit(account=account, request=request, backend=local_cluster)

    submit("ann-normal", 8)
    submit("ann-spare", 3, preemptible=True)
    waiting = submit("ann-ninth", 1)

    page = staff.get("/organizer/cluster/").content.decode()

    assert 'id="node-localhost"' in page and "11 GPUs (no fixed capacity)" in page
    assert "ann-normal" in page and "ann-spare" in page
    assert f'id="queued-{waiting.scheduler_id}"' in page
    assert "the account already uses its maximum number of GPUs at once" in page
    assert re.search(r"0:00:\d\d / 0:10:00", page)  # elapsed / time limit
    # Ann's budget row: normal and preemptible GPUs, each against its own maximum.
    assert "8 / 8 GPUs (100%)" in page and "3 / 8 GPUs (38%)" in page
    # Ben runs nothing on the cluster now (his RUNNING job row is only the platform's record).
    assert page.count("0 / 8 GPUs (0%)") == 2


def test_people_who_are_not_staff_do_not_see_the_queue(competition, local_cluster, tmp_path):
    client = Client()
    client.force_login(User.objects.create_user("curious", password="x"))
    reply = client.get("/organizer/cluster/")
    assert reply.status_code == 403 and b"Cluster" not in reply.content


def test_the_model_card_is_sanitised(staff, competition):
    page = staff.get("/organizer/agents/ann/").content.decode()
    assert "<script" not in page and "<img" not in page and 'href="javascript' not in page
    assert "&lt;script&gt;alert" in page  # shown as text, not run


def test_the_page_keeps_to_the_content_security_policy(staff, competition):
    reply = staff.get("/organizer/")
    assert "script-src 'self'" in reply["Content-Security-Policy"]
    assert " style=" not in reply.content.decode() and "<script" not in reply.content.decode()


def test_jobs_can_be_narrowed_to_one_agent(staff, competition):
    page = staff.get("/organizer/cluster/?agent=ben").content.decode()
    assert "ben-dpo" in page and "ann-sft" not in page


def test_sections_come_from_providers_and_a_broken_one_says_so():
    sections = provided_sections(
        [
            "tests.organizer.sample_sections:organizer_sections",
            "tests.organizer.sample_sections:broken_sections",
            "nonexistent_app.organizer:organizer_sections",
        ]
    )
    assert [s.title for s in sections] == [
        "Held-out benchmarks",
        "tests.organizer.sample_sections:broken_sections",
    ]
    assert sections[0].rows[0] == ["ann-model", "0.42"]
    assert "the eval database is down" in sections[1].note


def test_provided_sections_are_shown_escaped(staff, competition, monkeypatch):
    from frontend import organizer

    monkeypatch.setattr(
        organizer, "SECTION_PROVIDERS", ["tests.organizer.sample_sections:organizer_sections"]
    )
    page = staff.get("/organizer/evaluation/").content.decode()
    assert "Held-out benchmarks" in page and "median over 16 benchmarks" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page


@pytest.mark.parametrize(
    ("delta", "words"),
    [
        (dt.timedelta(seconds=42), "42 s"),
        (dt.timedelta(minutes=5, seconds=59), "5 min"),
        (dt.timedelta(hours=2, minutes=10), "2 h 10 min"),
        (dt.timedelta(days=3, hours=4, minutes=30), "3 d 4 h"),
        (dt.timedelta(days=6), "6 d"),
    ],
)
def test_durations_read_the_way_people_say_them(delta, words):
    assert duration_words(delta) == words

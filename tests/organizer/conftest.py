"""People and a cluster for the organizer's page tests (`test_page_*.py`)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from cluster.backends import cluster_backend


@pytest.fixture
def organizer_staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("organizer", password="x", is_staff=True))
    return client


@pytest.fixture
def page_cluster(settings, tmp_path):
    """The pages read the cluster live: here a local backend of the test's own."""
    settings.CLUSTER_BACKEND = "local"
    settings.VAR_DIR = tmp_path / "var"
    return cluster_backend()

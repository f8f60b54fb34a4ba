"""Where jobs run: a real Slurm cluster, or local processes under the same rules."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from cluster.backends.base import ClusterBackend


def cluster_backend() -> ClusterBackend:
    name = settings.CLUSTER_BACKEND
    if name == "slurm":
        from cluster.backends.slurm import SlurmBackend

        return SlurmBackend(
            partition=settings.CLUSTER_SLURM_PARTITION,
            parent_account=settings.CLUSTER_SLURM_PARENT_ACCOUNT,
        )
    if name == "local":
        from cluster.backends.local import LocalBackend

        return LocalBackend(log_dir=settings.VAR_DIR / "local-jobs")
    raise ImproperlyConfigured(f"CLUSTER_BACKEND={name!r} is not a known backend (slurm, local)")

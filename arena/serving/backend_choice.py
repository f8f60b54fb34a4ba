"""The serving backend the settings choose (`ARENA_SERVING_BACKEND`): `local` processes on this
machine (arena/serving/backends.py) or a GPU job per contestant on the cluster
(arena/serving/slurm.py). It sits above both, which build on the base in backends.py."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from arena.serving.backends import LocalServingBackend, ServingBackend
from arena.serving.slurm import SlurmServingBackend


def serving_backend_from_settings() -> ServingBackend:
    name = settings.ARENA_SERVING_BACKEND
    if name == "local":
        return LocalServingBackend(
            host=settings.ARENA_SERVING_HOST,
            base_port=settings.ARENA_SERVING_BASE_PORT,
            log_dir=settings.VAR_DIR / "logs",
        )
    if name == "slurm":
        return SlurmServingBackend(
            command=settings.ARENA_SERVING_SLURM_COMMAND, folder=settings.VAR_DIR / "serving"
        )
    raise ImproperlyConfigured(
        f"ARENA_SERVING_BACKEND={name!r} is not a known backend (local, slurm)"
    )

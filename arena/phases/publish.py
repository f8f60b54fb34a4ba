"""Where a release goes: the Hugging Face hub, behind one small interface.

`HubPublisher` is the real one: `HfApi().create_repo` then `upload_folder`, with the token
huggingface_hub finds itself (`HF_TOKEN`, or `hf auth login`). `FolderPublisher` lays the
repositories out in a local folder, as `<type>s/<org>/<name>/`, for a site without a network
and for tests; it copies the files the hub would receive and nothing else.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Literal

RepoType = Literal["model", "dataset"]


class Publisher(ABC):
    @abstractmethod
    def publish(self, *, folder: Path, repo_id: str, repo_type: RepoType, message: str) -> str:
        """Create `repo_id` if missing and upload `folder` as its content; where it went."""


class HubPublisher(Publisher):
    """The Hugging Face hub (needs the network and a token with write access to the org)."""

    def __init__(self, *, private: bool = False) -> None:
        from huggingface_hub import HfApi

        self.api = HfApi()
        self.private = private

    def publish(self, *, folder: Path, repo_id: str, repo_type: RepoType, message: str) -> str:
        url = self.api.create_repo(
            repo_id, repo_type=repo_type, private=self.private, exist_ok=True
        )
        self.api.upload_folder(
            folder_path=folder, repo_id=repo_id, repo_type=repo_type, commit_message=message
        )
        return str(url)


class FolderPublisher(Publisher):
    """A local stand-in for the hub: each repository becomes `<root>/<type>s/<repo_id>/`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def publish(self, *, folder: Path, repo_id: str, repo_type: RepoType, message: str) -> str:
        target = self.root / f"{repo_type}s" / repo_id
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, target, symlinks=True, dirs_exist_ok=True)
        return str(target)

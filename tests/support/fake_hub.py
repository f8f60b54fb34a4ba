"""A local HTTP server that answers as the Hugging Face hub does, for `huggingface_hub` pointed
at it with HF_ENDPOINT: repository info (`/api/datasets/<repo>/revision/<rev>`) and file
downloads (`/datasets/<repo>/resolve/<rev>/<path>`) and file lists (`/api/datasets/<repo>/tree/<rev>`), serving the fixture hub cache's snapshots.

A repository it does not hold answers 401 `X-Error-Code: RepoNotFound`, a revision it does not
hold 404 `RevisionNotFound`, a gated repository's files 401 `GatedRepo` without a token and
403 with a token not on its list, as the hub does."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class FakeHub:
    # repo id -> (the revision it holds, the snapshot folder whose files it serves)
    repos: dict[str, tuple[str, Path]]
    gated: dict[str, set[str]] = field(default_factory=dict)  # repo id -> tokens accepted
    url: str = ""


def _handler(state: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, value: object) -> None:
            body = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _repo(self, repo_id: str, revision: str) -> Path | None:
            if repo_id not in state.repos:
                self._error(401, "RepoNotFound", "Repository not found")
                return None
            held, folder = state.repos[repo_id]
            if revision != held:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return folder

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
            if parts[:2] == ["api", "datasets"] and parts[4:5] == ["tree"]:
                repo_id, revision = "/".join(parts[2:4]), parts[5]
                folder = self._repo(repo_id, revision)
                if folder is None:
                    return
                self._json(
                    [
                        {
                            "type": "file",
                            "path": p.relative_to(folder).as_posix(),
                            "size": p.stat().st_size,
                            "oid": hashlib.sha1(p.read_bytes()).hexdigest(),  # noqa: S324
                        }
                        for p in sorted(folder.rglob("*"))
                        if p.is_file()
                    ]
                )
                return
            if parts[:2] == ["api", "datasets"] and parts[4:5] == ["revision"]:
                repo_id, revision = "/".join(parts[2:4]), parts[5]
                folder = self._repo(repo_id, revision)
                if folder is None:
                    return
                siblings = [
                    {"rfilename": p.relative_to(folder).as_posix()}
                    for p in sorted(folder.rglob("*"))
                    if p.is_file()
                ]
                self._json(
                    {
                        "id": repo_id,
                        "sha": revision,
                        "private": False,
                        "gated": "manual" if repo_id in state.gated else False,
                        "siblings": siblings,
                    }
                )
                return
            if parts[:1] == ["datasets"] and parts[3:4] == ["resolve"]:
                repo_id, revision, name = "/".join(parts[1:3]), parts[4], "/".join(parts[5:])
                folder = self._repo(repo_id, revision)
                if folder is None:
                    return
                if repo_id in state.gated:
                    sent = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    if not sent:
                        self._error(
                            401,
                            "GatedRepo",
                            f"Access to dataset {repo_id} is restricted. You must have access "
                            "to it and be authenticated to access it. Please log in.",
                        )
                        return
                    if sent not in state.gated[repo_id]:
                        self._error(
                            403,
                            "GatedRepo",
                            f"Access to dataset {repo_id} is restricted and you are not in the "
                            "authorized list. Visit the dataset page to ask for access.",
                        )
                        return
                path = folder / name
                if not path.is_file():
                    self._error(404, "EntryNotFound", f"{name} does not exist on {revision}")
                    return
                body = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{hashlib.sha1(body).hexdigest()}"')  # noqa: S324
                self.send_header("X-Repo-Commit", revision)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            self._error(404, "EntryNotFound", f"no route {self.command} {self.path}")

    return Handler


@contextmanager
def fake_hub(state: FakeHub) -> Iterator[FakeHub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()

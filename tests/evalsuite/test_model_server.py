"""The server an on-demand evaluation job starts: vLLM on a GPU node, `transformers serve`
otherwise. No GPU here: the choice, vLLM's command line and its start-up checks are tested with
a stand-in `vllm` executable (a real process that listens, or that dies like vLLM out of memory)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from arena.serving.local import ServerStartError, SupervisedModelServer
from arena.serving.vllm import (
    VllmOptions,
    cuda_visible,
    vllm_executable,
    vllm_serve_command,
)
from evalsuite.checkpoint_job import CheckpointJob
from evalsuite.model_server import VllmModelServer, job_model_server, log_tail, server_choice


def test_auto_serves_with_vllm_only_on_a_gpu_node_that_has_it():
    on_gpu = server_choice("auto", cuda=True, vllm="/opt/vllm/bin/vllm")
    assert (on_gpu.kind, on_gpu.device, on_gpu.executable) == ("vllm", "cuda", "/opt/vllm/bin/vllm")

    gpu_without_vllm = server_choice("auto", cuda=True, vllm=None)
    assert (gpu_without_vllm.kind, gpu_without_vllm.device) == ("transformers", "cuda")
    assert "vLLM not installed" in gpu_without_vllm.reason

    cpu = server_choice("auto", cuda=False, vllm="/opt/vllm/bin/vllm")
    assert (cpu.kind, cpu.device) == ("transformers", "cpu")


def test_a_forced_choice_is_kept_or_refused_in_words():
    assert server_choice("transformers", cuda=True, vllm="vllm").kind == "transformers"
    assert server_choice("vllm", cuda=True, vllm="vllm").kind == "vllm"
    with pytest.raises(ServerStartError, match="sees no NVIDIA GPU"):
        server_choice("vllm", cuda=False, vllm="vllm")
    with pytest.raises(ServerStartError, match="vLLM is not installed"):
        server_choice("vllm", cuda=True, vllm=None)
    with pytest.raises(ServerStartError, match="EVALS_SERVER is 'sglang'"):
        server_choice("sglang", cuda=True, vllm="vllm")


def test_a_gpu_is_visible_when_a_device_node_exists_and_slurm_does_not_hide_it(tmp_path):
    assert not cuda_visible({}, dev=tmp_path)
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    assert cuda_visible({}, dev=tmp_path)
    assert cuda_visible({"CUDA_VISIBLE_DEVICES": "0"}, dev=tmp_path)
    assert not cuda_visible({"CUDA_VISIBLE_DEVICES": ""}, dev=tmp_path)
    assert not cuda_visible({"CUDA_VISIBLE_DEVICES": "-1"}, dev=tmp_path)


def test_the_vllm_executable_is_the_configured_one_when_it_can_run(tmp_path):
    executable = tmp_path / "vllm"
    executable.write_text("#!/bin/sh\n")
    assert vllm_executable({"ARENA_VLLM_EXECUTABLE": str(executable)}) is None  # not executable
    executable.chmod(0o755)
    assert vllm_executable({"ARENA_VLLM_EXECUTABLE": str(executable)}) == str(executable)


def test_the_vllm_command_names_the_engine_settings_and_never_the_key():
    command = vllm_serve_command(
        "/opt/vllm/bin/vllm",
        Path("/var/evals/run-3/model"),
        host="127.0.0.1",
        port=18601,
        served_model_name="contestant-0123",
        options=VllmOptions(dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=0.85),
    )
    assert command == [
        "/opt/vllm/bin/vllm", "serve", "/var/evals/run-3/model",
        "--host", "127.0.0.1",
        "--port", "18601",
        "--served-model-name", "contestant-0123",
        "--dtype", "bfloat16",
        "--gpu-memory-utilization", "0.85",
        "--tensor-parallel-size", "1",
        "--load-format", "safetensors",
        "--generation-config", "auto",
        "--max-model-len", "4096",
    ]  # fmt: skip
    assert not any("api-key" in part for part in command)
    default = vllm_serve_command("vllm", "/m", host="h", port=1, served_model_name="n")
    assert "--max-model-len" not in default  # the model's own context length


def _fake_vllm(folder: Path, body: str) -> Path:
    """A stand-in for `vllm serve` (no GPU here): a real process run with the same argv and
    environment the job gives vLLM."""
    script = folder / "vllm"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


LISTENING_VLLM = """
import http.server, json, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(os.path.join(os.path.dirname(sys.argv[0]), "seen.json"), "w") as seen:
    json.dump({"argv": sys.argv[1:], "key": os.environ.get("VLLM_API_KEY")}, seen)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _checkpoint(tmp_path: Path) -> Path:
    checkpoint = tmp_path / "model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    return checkpoint


def _vllm_server(tmp_path: Path, executable: Path, *, ready_timeout_s: float) -> VllmModelServer:
    return VllmModelServer(
        checkpoint=_checkpoint(tmp_path),
        port=_free_port(),
        executable=str(executable),
        log_path=tmp_path / "serve.log",
        ready_timeout_s=ready_timeout_s,
    )


def test_the_vllm_server_is_up_once_its_own_socket_listens_and_health_answers(tmp_path):
    executable = _fake_vllm(tmp_path, LISTENING_VLLM)
    server = _vllm_server(tmp_path, executable, ready_timeout_s=30)
    server.start()
    try:
        import json

        seen = json.loads((tmp_path / "seen.json").read_text())
        assert seen["key"] == server.api_key  # through the environment...
        assert server.api_key not in " ".join(seen["argv"])  # ...never on the command line
        assert seen["argv"][:2] == ["serve", str(tmp_path / "model")]
        assert server.endpoint.model == server.served_model_name
        assert server.served_model_name.startswith("contestant-")
        assert server.endpoint.base_url == f"http://127.0.0.1:{server.port}/v1"
    finally:
        server.stop()
    assert server._process is None


def test_a_vllm_server_that_dies_fails_the_job_with_the_end_of_its_log(tmp_path):
    executable = _fake_vllm(
        tmp_path,
        "import sys\nprint('torch.OutOfMemoryError: CUDA out of memory', flush=True)\nsys.exit(3)\n",
    )
    server = _vllm_server(tmp_path, executable, ready_timeout_s=30)
    with pytest.raises(ServerStartError) as failed:
        server.start()
    message = str(failed.value)
    assert "vLLM server for model exited with code 3" in message
    assert "CUDA out of memory" in message


def test_a_vllm_server_that_never_listens_fails_after_its_timeout(tmp_path):
    executable = _fake_vllm(tmp_path, "import time\ntime.sleep(60)\n")
    server = _vllm_server(tmp_path, executable, ready_timeout_s=2)
    with pytest.raises(ServerStartError, match="not listening on port .* after 2 s"):
        server.start()
    assert server._process is None  # stopped, not left loading on the GPU


def test_on_a_cpu_node_the_job_serves_with_guarded_transformers_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    server, choice = job_model_server(
        _checkpoint(tmp_path), folder=tmp_path, base_port=_free_port(), setting="auto"
    )
    try:
        assert (choice.kind, choice.device) == ("transformers", "cpu")
        assert isinstance(server, SupervisedModelServer)
        assert server.device == "cpu"
        assert server.listener is not None  # the platform holds the port from the start
    finally:
        server.stop()


def test_forcing_vllm_on_a_cpu_node_fails_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ServerStartError, match="sees no NVIDIA GPU"):
        job_model_server(_checkpoint(tmp_path), folder=tmp_path, base_port=18600, setting="vllm")


def test_a_job_pickled_before_the_server_setting_still_loads_with_auto():
    job = CheckpointJob("s", "c", 1, "x", "/f", ["gsm8k"], 64, "")
    assert job.server == "auto"
    assert job.vllm == VllmOptions()


def test_the_log_tail_is_bounded(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"x" * 10_000 + b"the end")
    assert log_tail(log, size=100).endswith("the end")
    assert len(log_tail(log, size=100)) == 100
    assert log_tail(tmp_path / "missing.log") == "(no log)"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

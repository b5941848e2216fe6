"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The files are parsed for what the deployment relies on, and the parts that run code (the
healthcheck and the e2e command) are run here against a real broker.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys

import pytest
import yaml

from tests.broker_process import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def dockerfile_instructions() -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, stage = [], None
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            stage = m.group(2) or m.group(1)
        out.append((stage, instr, args.strip()))
    return out


def stages() -> list[str]:
    return [s for s, instr, _ in dockerfile_instructions() if instr == "FROM"]


def in_stage(stage: str, instr: str) -> list[str]:
    return [args for s, i, args in dockerfile_instructions() if s == stage and i == instr]


# --- Dockerfile ------------------------------------------------------------------------------------------


def test_dockerfile_builds_from_slim_python_311():
    froms = [args for _, i, args in dockerfile_instructions() if i == "FROM"]
    assert froms[0].split()[0] == "python:3.11-slim"


def test_runtime_is_the_last_stage_and_runs_as_non_root():
    final = stages()[-1]
    users = in_stage(final, "USER")
    assert users and users[-1] not in ("root", "0", "0:0")
    # The user is created in the image, not assumed.
    assert any("useradd" in run and users[-1] in run for run in in_stage(stages()[0], "RUN"))


def test_runtime_volume_port_healthcheck_and_command():
    final = stages()[-1]
    assert in_stage(final, "VOLUME") == ['["/data"]']
    assert in_stage(final, "EXPOSE") == ["9092"]
    (health,) = in_stage(final, "HEALTHCHECK")
    assert health.split()[health.split().index("CMD") + 1] == "python"
    (cmd,) = in_stage(final, "CMD")
    words = shlex.split(cmd)
    assert words[0] == "exec", "the broker must be PID 1 to get docker stop's SIGTERM"
    assert words[1:8] == ["kshare-broker", "--host", "0.0.0.0", "--port", "9092", "--data-dir", "/data"]
    assert words[8:] == ["--override", "advertised.listeners=${KSHARE_ADVERTISED_LISTENERS}"]
    assert any("KSHARE_ADVERTISED_LISTENERS=PLAINTEXT://" in env for env in in_stage(final, "ENV"))


def test_dev_stage_installs_the_dev_extras():
    assert "dev" in stages()
    assert any("'.[dev]'" in run for run in in_stage("dev", "RUN"))
    (user,) = in_stage("dev", "USER")
    assert user != "root"


def test_dockerignore_keeps_host_state_out_of_the_image():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".venv", ".git", "data"):
        assert entry in ignored


# --- docker-compose.yml -------------------------------------------------------------------------------


def test_compose_services():
    assert set(COMPOSE["services"]) == {"broker", "e2e"}


def test_broker_service():
    broker = COMPOSE["services"]["broker"]
    assert broker["build"] in (".", {"context": "."})
    assert "9092:9092" in broker["ports"]
    volumes = broker["volumes"]
    named = [v.split(":")[0] for v in volumes if v.endswith(":/data")]
    assert named and named[0] in COMPOSE["volumes"], "/data must be a named volume"
    assert broker["environment"]["KSHARE_ADVERTISED_LISTENERS"].endswith("PLAINTEXT://broker:9092}")
    hc = broker["healthcheck"]
    assert hc["test"][:3] == ["CMD", "python", "-c"]
    assert hc["retries"] >= 1 and hc["interval"]


def test_e2e_service():
    e2e = COMPOSE["services"]["e2e"]
    assert e2e["build"] == {"context": ".", "target": "dev"}
    assert e2e["environment"]["KSHARE_BOOTSTRAP"] == "broker:9092"
    assert e2e["depends_on"] == {"broker": {"condition": "service_healthy"}}
    cmd = e2e["command"]
    assert cmd[:3] == ["python", "-m", "pytest"]
    pytest_args = cmd[3:]
    assert pytest_args[pytest_args.index("-m") + 1] == "e2e"


# --- the parts that run code ---------------------------------------------------------------------------------


def healthcheck_codes() -> list[str]:
    (health,) = in_stage(stages()[-1], "HEALTHCHECK")
    docker_code = shlex.split(health[health.index("CMD") + 3 :])[2]
    compose_code = COMPOSE["services"]["broker"]["healthcheck"]["test"][3]
    return [docker_code, compose_code]


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["Dockerfile", "compose"])
def test_healthcheck_passes_on_a_broker_and_fails_without_one(broker, which):
    code = healthcheck_codes()[["Dockerfile", "compose"].index(which)]
    assert "('127.0.0.1', 9092)" in code
    host, port = broker.bootstrap.rsplit(":", 1)
    live = code.replace("('127.0.0.1', 9092)", f"({host!r}, {port})")
    r = subprocess.run([sys.executable, "-c", live], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    dead = code.replace("('127.0.0.1', 9092)", f"('127.0.0.1', {free})")
    assert subprocess.run([sys.executable, "-c", dead], capture_output=True, timeout=30).returncode != 0


@pytest.mark.e2e
@pytest.mark.needs_private_broker
def test_e2e_command_runs_against_an_external_broker(broker):
    """The e2e service's command with KSHARE_BOOTSTRAP: shared-broker tests pass, private ones skip."""
    cmd = COMPOSE["services"]["e2e"]["command"]
    assert cmd[0] == "python"
    env = {**os.environ, "KSHARE_BOOTSTRAP": broker.bootstrap}
    r = subprocess.run(
        [sys.executable, *cmd[1:], "-rs", "tests/test_server.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and re.search(r"\d+ skipped", summary), summary
    assert "needs a private broker" in r.stdout

"""Shared fixtures: subprocess brokers for end-to-end tests, a raw protocol client.

``broker`` is one broker per test session (fast; tests use unique topic names), or the broker
named by ``KSHARE_BOOTSTRAP`` (docker-compose runs the suite against its broker service that
way). ``broker_factory`` makes private brokers for tests that restart, crash or reconfigure.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.log.memory import MemoryLogStore
from tests.broker_process import BrokerProcess


def pytest_collection_modifyitems(config, items):
    """With KSHARE_BOOTSTRAP (docker-compose e2e) skip tests that must start their own broker.

    A test needs a private broker when it restarts, reconfigures or reads the log of one: it
    is marked ``needs_private_broker`` or uses ``broker_factory``.
    """
    if not os.environ.get("KSHARE_BOOTSTRAP"):
        return
    skip = pytest.mark.skip(reason="needs a private broker; KSHARE_BOOTSTRAP names a shared one")
    for item in items:
        if "needs_private_broker" in item.keywords or "broker_factory" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


@dataclass
class ExternalBroker:
    bootstrap: str


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    external = os.environ.get("KSHARE_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield b
    code = b.stop()
    assert code == 0, f"shared broker exited with {code}; log:\n{b.log()}"
    assert "Traceback" not in b.log(), b.log()


@pytest.fixture
async def local(tmp_path):
    """A broker in this process (memory log store) on 127.0.0.1, for tests that patch its
    handlers or look at its state; blocking clients talk to it from a thread."""
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"}),
               store=MemoryLogStore())
    host, port = await b.start()
    b.bootstrap = f"{host}:{port}"
    yield b
    await b.stop()


@pytest.fixture
def broker_factory(tmp_path):
    made: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, name: str = "data", start: bool = True) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, overrides)
        made.append(b)
        return b.start() if start else b

    yield make
    for b in made:
        b.kill()


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique to the test (the shared broker outlives tests)."""
    return f"t-{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name)[:60]}-{uuid.uuid4().hex[:8]}"

"""The README stays true: its API table, its commands, its examples and its share-group config
table are checked here."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from broker import api_table
from broker.handlers import REGISTRY, supported_api_versions
from coordinator.group.broker_defaults import BROKER_CONFIG_DEFS
from coordinator.group.configs import GROUP_CONFIG_DEFS
from tests.broker_process import ROOT

README = ROOT / "README.md"
START_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/kshare-broker"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev,spark]' && .venv/bin/python -m pytest -q"


def readme() -> str:
    return README.read_text()


def section(title: str) -> str:
    text = readme()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_api_table_matches_the_handler_registry():
    block = api_table.extract(readme())
    assert block is not None, "README lost its api-table markers"
    assert block == api_table.block(), "stale table: run `python -m broker.api_table --update README.md`"


def test_api_table_rows_are_the_api_versions_answer():
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)-(\d+) \|$", api_table.render(), re.M)
    assert [(int(k), int(lo), int(hi)) for _, k, lo, hi in rows] == [
        (v.api_key, v.min_version, v.max_version) for v in supported_api_versions()
    ]
    assert ("ApiVersions", "18") in [(name, k) for name, k, _, _ in rows]


def test_api_table_update_rewrites_only_the_block(tmp_path):
    doc = tmp_path / "README.md"
    doc.write_text(f"before\n{api_table.BEGIN}\n| stale |\n{api_table.END}\nafter\n")
    assert api_table.update(doc) is True
    assert doc.read_text() == f"before\n{api_table.block()}\nafter\n"
    assert api_table.update(doc) is False


def test_api_table_cli_prints_the_table():
    r = subprocess.run([sys.executable, "-m", "broker.api_table"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == api_table.render()


def shell_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, re.S)]


def test_exactly_two_set_up_commands():
    assert shell_blocks(section("Set up")) == [START_COMMAND, TEST_COMMAND]


def test_ci_runs_exactly_the_readme_test_command():
    script = ROOT / ".ci" / "run"
    assert script.stat().st_mode & 0o111, ".ci/run must be executable"
    lines = [ln for ln in script.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0] == "set -euo pipefail"
    assert lines[-1] == TEST_COMMAND
    assert all(ln.startswith(("set ", "cd ")) for ln in lines[:-1]), lines


def quickstart_code() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", section("Quickstart"), re.S)
    return code


QUICKSTART_APIS = {0: "Produce", 1: "Fetch", 3: "Metadata", 18: "ApiVersions", 19: "CreateTopics"}


@pytest.mark.e2e
def test_quickstart_runs(broker, topic_name):
    missing = [name for key, name in QUICKSTART_APIS.items() if key not in REGISTRY]
    if missing:
        pytest.skip(f"the quickstart needs {', '.join(missing)}, not served yet")
    code = quickstart_code()
    assert 'BOOTSTRAP = "127.0.0.1:9092"' in code and 'TOPIC = "quickstart"' in code
    code = code.replace('BOOTSTRAP = "127.0.0.1:9092"', f'BOOTSTRAP = "{broker.bootstrap}"')
    code = code.replace('TOPIC = "quickstart"', f'TOPIC = "{topic_name}"')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[(0, 'key-0', 'hello 0'), (1, 'key-1', 'hello 1'), (2, 'key-2', 'hello 2')]"
    # The printed result in the README is the real one.
    assert "# [(0, 'key-0', 'hello 0'), (1, 'key-1', 'hello 1'), (2, 'key-2', 'hello 2')]" in quickstart_code()


def share_groups_code() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", section("Share groups"), re.S)
    return code


SHARE_EXAMPLE_OUTPUT = "[('job-0', 1), ('job-1', 1), ('job-2', 1), ('job-2', 2), ('job-3', 1), ('job-4', 1)]"


@pytest.mark.e2e
def test_share_group_example_runs(broker, topic_name):
    """The ShareConsumer example: a released job comes back once with delivery count 2."""
    code = share_groups_code()
    for line in ('BOOTSTRAP = "127.0.0.1:9092"', 'TOPIC = "jobs"', 'GROUP = "workers"'):
        assert line in code
    code = code.replace('BOOTSTRAP = "127.0.0.1:9092"', f'BOOTSTRAP = "{broker.bootstrap}"')
    code = code.replace('TOPIC = "jobs"', f'TOPIC = "{topic_name}"')
    code = code.replace('GROUP = "workers"', f'GROUP = "g-{topic_name}"')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == SHARE_EXAMPLE_OUTPUT
    assert f"# {SHARE_EXAMPLE_OUTPUT}" in share_groups_code()
    # What README says the admin CLI shows afterwards: START-OFFSET 2, LAG 0.
    r = subprocess.run([sys.executable, "-m", "broker.tools.share_groups", "--bootstrap-server", broker.bootstrap,
                        "--describe", "--group", f"g-{topic_name}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-5:] == [f"g-{topic_name}", topic_name, "0", "2", "0"], r.stdout
    assert "shows the group's lag: 0" in section("Share groups")
    assert "(2 after the example above)" in section("Share groups: admin CLI")


def test_share_group_config_table_matches_the_config_definitions():
    """Every share-group config is in the table, and every default or bound quoted in the
    section is the broker's."""
    text = section("Share groups")
    rows = re.findall(r"^\| `(share\.[a-z.]+)` \| (.*?) \|", text, re.M)
    share_configs = sorted(n for n in GROUP_CONFIG_DEFS if n.startswith("share."))
    assert sorted(name for name, _ in rows) == share_configs
    for name, default in rows:
        definition = GROUP_CONFIG_DEFS[name]
        if definition.type == "string":
            assert default == f"`{definition.default}`", name
        else:
            assert default.startswith(f"`group.{name}` ("), name
    quoted = re.findall(r"`(group\.share\.[a-z.]+)` \((\d+)", text)
    assert len(quoted) >= 12
    for prop, value in quoted:
        assert BROKER_CONFIG_DEFS[prop].default == int(value), prop


def test_readme_is_packaged_metadata():
    """pyproject's readme points here; a missing README breaks `pip install -e .`."""
    assert 'readme = "README.md"' in (ROOT / "pyproject.toml").read_text()
    assert README.exists()

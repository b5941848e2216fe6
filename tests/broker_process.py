"""A kshare broker in a subprocess, for end-to-end tests with real clients.

The broker listens on 127.0.0.1 with an OS-picked port and prints ``kshare listening on
host:port`` once it serves; tests wait for that line (an event, not a sleep). ``stop`` sends
SIGTERM (graceful), ``kill`` sends SIGKILL (crash). Every broker is stopped at teardown.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"kshare listening on (\S+):(\d+)")
_METRICS = re.compile(r"kshare metrics on (\S+):(\d+)")


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, log_level: str = "INFO",
                 extra_args: list[str] | None = None, preexec_fn=None) -> None:
        """``extra_args``: more command-line flags, e.g. ``["--metrics-port", "0"]``;
        ``preexec_fn``: run in the child before the broker starts (e.g. to set rlimits)."""
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.log_level = log_level
        self.extra_args = list(extra_args or [])
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.metrics_address: tuple[str, int] | None = None  # from "kshare metrics on host:port"
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self._log_file = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0, port: int | None = None) -> BrokerProcess:
        """Start (or restart, keeping the same port unless told otherwise) and wait until serving."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        port = self.port if port is None and self.port is not None else (port or 0)
        cmd = [
            sys.executable, "-m", "broker", "--host", "127.0.0.1", "--port", str(port),
            "--data-dir", str(self.data_dir), "--log-level", self.log_level,
        ]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        cmd += self.extra_args
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._log_file, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=self.preexec_fn,
        )
        found = threading.Event()

        def read_stdout() -> None:
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace")
                if (mm := _METRICS.search(line)) is not None:
                    self.metrics_address = (mm.group(1), int(mm.group(2)))  # printed before "listening"
                m = _LISTENING.search(line)
                if m and not found.is_set():
                    self.port = int(m.group(2))
                    found.set()

        self._reader = threading.Thread(target=read_stdout, daemon=True)
        self._reader.start()
        if not found.wait(timeout_s):
            self.kill()
            raise RuntimeError(f"broker did not start within {timeout_s}s; log:\n{self.log()}")
        return self

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"broker did not stop within {timeout_s}s; log:\n{self.log()}")
        finally:
            self._close_log()

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def _close_log(self) -> None:
        """After the process exited: its stdout reader sees EOF, then the pipe can be closed."""
        if self.proc is not None and self.proc.stdout is not None and not self.proc.stdout.closed:
            self._reader.join(5)
            self.proc.stdout.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

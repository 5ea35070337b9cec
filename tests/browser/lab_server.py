"""Start and stop a throwaway JupyterLab server for the browser tests.

The server runs from this venv on a free local port with a random token, and with its own config,
runtime, data, settings, workspaces and IPython dirs (so nothing of the user's Jupyter set-up leaks
in and nothing is left behind). Lab extensions and the ``python3`` kernel are still found: they live
under ``sys.prefix/share/jupyter``, which Jupyter searches whatever the data dir is. The app object
is exposed in the browser (``window.jupyterapp``) so the tests can read kernel status and outputs.
The server is stopped by its own PID: SIGTERM (it shuts its kernels down), then SIGKILL to its process
group if it hangs; a kernel left behind exits by itself when its parent is gone (ipykernel's parent poller).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """``with LabServer(root) as lab: lab.url("x.ipynb")``; ``lab.log`` holds the server's output."""

    def __init__(self, root: Path, startup_timeout: float = 120):
        self.root = Path(root)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.home = Path(tempfile.mkdtemp(prefix="radixlab-lab-"))
        self.log = self.home / "server.log"
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    # -- life cycle --------------------------------------------------------------------------------

    def start(self) -> "LabServer":
        env = dict(os.environ)
        for name in ("config", "runtime", "data", "settings", "workspaces", "ipython"):
            (self.home / name).mkdir()
        env.update(JUPYTER_CONFIG_DIR=str(self.home / "config"), JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
                   JUPYTER_DATA_DIR=str(self.home / "data"), JUPYTERLAB_SETTINGS_DIR=str(self.home / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(self.home / "workspaces"), IPYTHONDIR=str(self.home / "ipython"),
                   JUPYTER_PLATFORM_DIRS="1", RADIXLAB_DEVICE=os.environ.get("RADIXLAB_DEVICE", "cpu"))
        env.pop("JUPYTER_PATH", None)
        # No "news" toast and no pop-ups over the notebook in screenshots.
        self._write_settings("@jupyterlab/apputils-extension/notification.jupyterlab-settings",
                             {"fetchNews": "false", "checkForUpdates": False})
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
               "--LabApp.extension_manager=readonly", "--ServerApp.open_browser=False"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI runners
            cmd.append("--allow-root")
        with open(self.log, "wb") as log:
            # Own session and process group: a SIGKILL to the group cannot reach pytest or the browser.
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                         start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.api("status") is not None:
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer /api/status within {self.startup_timeout} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL to its process group); remove its dirs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        if self.proc is not None:
            try:  # helpers of the server still in its process group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.home, ignore_errors=True)  # config, data, settings, runtime and the log

    def __enter__(self) -> "LabServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """The JupyterLab URL that opens ``path`` (relative to the root dir) alone (``reset``: no tabs
        restored from the previous page's workspace)."""
        return f"{self.base}/lab/tree/{path}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else {}

    def shutdown_kernels(self) -> None:
        """Delete every session (and its kernel): one notebook's kernel must not slow the next."""
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _write_settings(self, rel: str, data: dict) -> None:
        path = self.home / "settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))

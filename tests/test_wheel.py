"""The wheel works outside a checkout: built offline from the package's own files, installed in a
fresh venv, ``labeler demo --no-app`` in an empty folder builds the demo database, the app's
packaged Streamlit defaults are found, and ``labeler demo`` serves the app.

The venv sees the dependencies of the environment running the tests (a ``.pth`` file lists its
site-packages, so nothing is downloaded) but not its labeler: editable installs hook in through
``.pth`` files that a listed folder's ``.pth`` cannot run, and the wheel's copy comes first anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str | Path], **kw) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kw)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def build_wheel(out: Path) -> Path:
    """Build from a copy holding only what the build reads, so local leftovers (build/, *.egg-info,
    untracked files) can neither leak into the wheel nor be written next to the checkout."""
    src = out / "src"
    shutil.copytree(ROOT / "labeler", src / "labeler", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    # offline: the running environment's setuptools (the [test] extra asks for one with bdist_wheel)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", out / "dist", src])
    (wheel,) = (out / "dist").glob("rag_labeler-*.whl")
    return wheel


def make_venv(path: Path, wheel: Path) -> Path:
    run([sys.executable, "-m", "venv", "--without-pip", path])
    python = path / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    deps = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (Path(purelib) / "outer-deps.pth").write_text("\n".join(deps) + "\n")
    # -I: the outer environment's rag-labeler is visible through the .pth; install ours regardless
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "-I", "--no-deps", "--no-index", wheel])
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, url: str, seconds: float = 40) -> None:
    for _ in range(int(seconds / 0.25)):
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        try:  # waits a quarter second, or notices that the server died
            proc.wait(0.25)
            pytest.fail(f"labeler demo exited {proc.returncode}: {proc.stdout.read()[-3000:]}")
        except subprocess.TimeoutExpired:
            pass
    pytest.fail(f"the app did not answer {url} in {seconds} s")


def test_the_wheel_runs_the_demo_in_an_empty_folder(tmp_path):
    import setuptools

    if tuple(int(p) for p in setuptools.__version__.split(".")[:2]) < (70, 1):
        pytest.fail(f"setuptools {setuptools.__version__} cannot build wheels by itself: pip install -e '.[test]'")
    wheel = build_wheel(tmp_path / "build")
    venv = make_venv(tmp_path / "venv", wheel)
    empty = tmp_path / "empty"
    empty.mkdir()
    home = tmp_path / "home"  # no ~/.streamlit/config.toml of whoever runs the tests
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LABELER_DB") and not k.startswith("STREAMLIT_")} | {"HOME": str(home)}

    demo = run([venv / "bin" / "labeler", "demo", "--no-app"], cwd=empty, env=env)
    assert "demo database built" in demo.stderr
    with sqlite3.connect(empty / "labeler-demo.db") as db:
        assert db.execute("SELECT count(*) FROM queries").fetchone()[0] > 150
        assert db.execute("SELECT count(*) FROM relevance_labels").fetchone()[0] > 0
    assert sorted(p.name for p in empty.iterdir() if not p.name.startswith("labeler-demo.db")) == []

    probe = run([venv / "bin" / "python", "-c", "import json, labeler; from labeler.app import launch; "
                 "from labeler.version import version; print(json.dumps({'file': labeler.__file__, "
                 "'version': version(), 'defaults': launch.packaged_defaults(), "
                 "'cmd': launch.streamlit_command()}))"], cwd=empty, env=env)
    found = json.loads(probe.stdout)
    assert Path(found["file"]).is_relative_to(venv), found["file"]  # the wheel's labeler, not the checkout's
    assert found["version"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert found["defaults"]["theme.primaryColor"] == "#3b5bdb"
    cmd = found["cmd"]
    assert Path(cmd[4]).is_relative_to(venv) and Path(cmd[4]).is_file()
    assert cmd[cmd.index("--theme.primaryColor") + 1] == "#3b5bdb"

    port = free_port()
    # its own process group: labeler waits on streamlit, and both must stop
    proc = subprocess.Popen([venv / "bin" / "labeler", "demo", "--headless", "--port", str(port)], cwd=empty,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/_stcore/health")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

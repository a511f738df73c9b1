"""What an installed labeler needs besides its code: the demo data and the app's Streamlit defaults
inside the package, the user's own Streamlit config winning over those defaults, and the names
(distribution rag-labeler, import package and command labeler). The wheel itself: test_wheel.py."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from labeler import version as V
from labeler.app import launch
from labeler.cli import cli
from labeler.demo import DEMO_FILES, demo_files
from labeler.errors import LabelerError

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_demo_files_are_package_data():
    folder = resources.files("labeler.demo_data")
    with demo_files() as paths:
        assert sorted(paths) == sorted(DEMO_FILES)
        for name, path in paths.items():
            assert path.is_file() and path.stat().st_size > 1000, name
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["labeler.demo_data"]
    assert all(any(Path(name).match(g) for g in globs) for name in DEMO_FILES)
    assert (folder / "questions.jsonl").is_file()  # the source data/make_logs.py derives logs and golden from


def test_the_packaged_defaults_are_streamlit_options_with_streamlit_env_names():
    from streamlit import config

    options = config.get_config_options()
    defaults = launch.packaged_defaults()
    assert defaults["theme.primaryColor"] == "#3b5bdb" and defaults["server.maxUploadSize"] == 1024
    assert PYPROJECT["tool"]["setuptools"]["package-data"]["labeler.app"] == [launch.DEFAULTS]
    for option, value in defaults.items():
        assert option in options, f"{option} is not a Streamlit option"
        assert launch.env_var(option) == options[option].env_var
        assert isinstance(value, str | int | float | bool), option


def test_streamlit_run_accepts_the_command_line():
    from streamlit.web.cli import main_run

    cmd = launch.streamlit_command(host="127.0.0.1", port=8765, headless=True, cwd=Path("/nonexistent"),
                                   home=Path("/nonexistent"), environ={})
    assert cmd[1:5] == ["-m", "streamlit", "run", str(launch.APP)] and launch.APP.is_file()
    params = main_run.make_context("run", cmd[4:]).params  # click parses and checks types, runs nothing
    assert params["theme_primaryColor"] == "#3b5bdb"
    assert params["server_maxUploadSize"] == 1024 and params["server_runOnSave"] is False
    assert params["server_port"] == 8765 and params["server_headless"] is True
    assert params["server_address"] == "127.0.0.1" and params["browser_gatherUsageStats"] is False


def write_config(folder: Path, text: str) -> Path:
    (folder / ".streamlit").mkdir(parents=True)
    (folder / ".streamlit" / "config.toml").write_text(text)
    return folder


def test_the_users_config_files_and_environment_win(tmp_path):
    cwd = write_config(tmp_path / "project", '[theme]\nprimaryColor = "#ff0000"\nbase = "dark"\n')
    home = write_config(tmp_path / "home", "[server]\nmaxUploadSize = 50\n")
    watch = ["--server.fileWatcherType", "none"]
    gc = ["--runner.postScriptGC", "false"]
    tool = ["--client.toolbarMode", "minimal"]
    flags = launch.default_flags(cwd=cwd, home=home, environ={"STREAMLIT_SERVER_RUN_ON_SAVE": "true"})
    assert flags == [*watch, *gc, *tool]  # the options neither file nor the environment sets
    flags = launch.default_flags(cwd=cwd, home=home, environ={"STREAMLIT_SERVER_RUN_ON_SAVE": "true",
                                                              "STREAMLIT_RUNNER_POST_SCRIPT_GC": "true",
                                                              "STREAMLIT_CLIENT_TOOLBAR_MODE": "auto",
                                                              "STREAMLIT_SERVER_FILE_WATCHER_TYPE": "auto"})
    assert flags == []
    flags = launch.default_flags(cwd=cwd, home=tmp_path / "nobody", environ={})
    assert flags == ["--server.runOnSave", "false", *watch, "--server.maxUploadSize", "1024", *gc, *tool]
    everything = launch.default_flags(cwd=tmp_path / "empty", home=tmp_path / "nobody", environ={})
    assert everything == ["--server.runOnSave", "false", *watch, "--server.maxUploadSize", "1024", *gc, *tool,
                          "--theme.primaryColor", "#3b5bdb"]


def test_the_address_and_privacy_flags_beat_any_config(tmp_path):
    cwd = write_config(tmp_path, '[server]\naddress = "0.0.0.0"\n[browser]\ngatherUsageStats = true\n')
    cmd = launch.streamlit_command(host="127.0.0.1", cwd=cwd, home=tmp_path / "nobody", environ={})
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--browser.gatherUsageStats") + 1] == "false"
    assert cmd[cmd.index("--client.showErrorDetails") + 1] == "type"
    assert "--server.headless" not in cmd and "--server.port" not in cmd


def test_a_broken_user_config_is_one_clear_error(tmp_path):
    cwd = write_config(tmp_path, "[server\n")
    with pytest.raises(LabelerError, match=r"\.streamlit/config\.toml: cannot read it as TOML .*fix or remove"):
        launch.default_flags(cwd=cwd, home=tmp_path / "nobody", environ={})


def test_the_checkouts_streamlit_config_agrees_with_the_packaged_defaults():
    checkout = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    for option, value in launch.packaged_defaults().items():
        section, key = option.split(".")
        assert checkout[section][key] == value, option


def test_names_distribution_rag_labeler_package_and_command_labeler(monkeypatch):
    assert PYPROJECT["project"]["name"] == V.DISTRIBUTION == "rag-labeler"
    assert PYPROJECT["project"]["scripts"] == {"labeler": "labeler.cli:cli"}
    monkeypatch.setattr(V, "DISTRIBUTION", "rag-labeler-not-installed")
    assert V.version() == "0"  # never another project's version, never an exception
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output == "labeler, version 0\n"


def test_the_command_line_starts_without_pandas():
    """sqlite-utils imports pandas when it can (0.2 s of every command's start-up, and a heavier
    process for the ingest's parser to fork); the store imports it first without, whatever order
    the other modules import in. Checked in a fresh interpreter: this one has pandas loaded."""
    import subprocess
    import sys

    code = "import sys; import labeler.cli, labeler.ingest.logs; print(sorted({'pandas', 'pyarrow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

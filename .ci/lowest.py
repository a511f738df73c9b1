"""Print pip constraints that pin every runtime dependency in pyproject.toml to its lower bound.

.ci/run installs the package with them and runs the unit tests, so each `>=` states a version the
tests pass with. A runtime dependency without a `>=` bound is an error: say what it needs.
Standard library only, so it runs before anything is installed.
"""

import re
import sys
import tomllib
from pathlib import Path

pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
if sys.argv[1:] == ["--test"]:
    # the [test] extra without the extras it pulls in by name (the consumers' datasets needs a newer
    # pyarrow than the lowest the package allows; their test skips without them)
    for line in pyproject["project"]["optional-dependencies"]["test"]:
        if not line.startswith(pyproject["project"]["name"]):
            print(line)
    sys.exit(0)
for line in pyproject["project"]["dependencies"]:
    # name, optional [extras], version specifiers, optional ; marker (PEP 508, without URLs)
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)(;.*)?", line)
    lowest = [spec.strip()[2:].strip() for spec in (match[3] if match else "").split(",")
              if spec.strip().startswith(">=")]
    if not match or len(lowest) != 1:
        sys.exit(f"pyproject.toml: {line!r} needs exactly one >= lower bound")
    print(f"{match[1]}=={lowest[0]}")

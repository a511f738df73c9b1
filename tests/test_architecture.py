"""The package's shape, read from its imports: floors, no circles, private names stay private.

Every module under labeler/ is parsed with ``ast`` (nothing is imported), and every ``import`` in it
counts, at module level, inside functions and under ``TYPE_CHECKING`` alike: an import hidden in a
function still ties the two modules together. The rules are the ones in DESIGN.md ("Layout: floors"):

(a) no import circle between modules;
(b) no module imports another module's private name (``from .x import _helper``), and a private
    module (``pkg/_helpers.py``) is imported only from inside its own package;
(c) pages (labeler/app/views) import none of sqlite3, sqlite_utils, openai, sklearn;
(d) an arrow never points up a floor (``FLOORS`` below), and core/ imports nothing from labeler but
    the error family beside it.

Each failure prints the offending chain, for example ``labeler.a -> labeler.b -> labeler.a``.
Run ``python tests/test_architecture.py`` to print every finding at once.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "labeler"

# The floors, lowest first (DESIGN.md, "Layout: floors"): the ground floor (core), the store, pure
# maths, the domain packages, and the faces (cli/, app/). A module belongs to the floor of the longest
# prefix listed here and may import modules on its own floor or below, never above. The domain
# packages are themselves floors, in the order in which they build on one another: accounts and
# privacy; the facts of the corpus (retrievers, signals, the holdout split); labels; ingest and
# sources (an ingest re-queues labels); llm and search; judge (calibration reads labels and calls the
# llm); report and estimate; and the products built on all of them.
FLOORS: list[tuple[str, list[str]]] = [
    ("core", ["labeler.core", "labeler.errors", "labeler.owners", "labeler.version"]),
    ("store", ["labeler.db", "labeler.schema"]),
    ("maths", ["labeler.metrics", "labeler.agreement"]),
    ("accounts", ["labeler.accounts", "labeler.audit", "labeler.privacy"]),
    ("corpus facts", ["labeler.retrievers", "labeler.signals", "labeler.holdout"]),
    ("labels", ["labeler.labels"]),
    ("ingest", ["labeler.ingest", "labeler.sources"]),
    ("llm", ["labeler.llm", "labeler.search"]),
    ("judge", ["labeler.judge"]),
    ("numbers", ["labeler.report", "labeler.estimate"]),
    ("products", ["labeler.topics", "labeler.synth", "labeler.export", "labeler.harness"]),
    ("demo", ["labeler.demo", "labeler.demo_data"]),
    ("faces", ["labeler.cli", "labeler.app", "labeler", "labeler.__main__"]),
]

# A package face (its __init__) on a higher floor than its modules. agreement/'s face still answers
# the judge-run names that moved to judge.calibration (loaded lazily, when asked for), so it sits with
# the judge; agreement.stats and agreement.retrievers stay pure maths.
FACE_FLOORS: dict[str, str] = {"labeler.agreement": "judge"}

PAGES = "labeler.app.views"
PAGE_FORBIDDEN = ("sqlite3", "sqlite_utils", "openai", "sklearn")

@dataclass(frozen=True)
class Import:
    """One imported name: ``module`` imports ``target`` (a module), optionally taking ``name``."""

    module: str
    target: str
    name: str | None
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """Every import in the file, resolved to modules; ``from pkg import sub`` points at ``pkg.sub``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    yield Import(module, sub, None, node.lineno)
                else:
                    yield Import(module, base, alias.name, node.lineno)


def graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[Import]]:
    edges: dict[str, set[str]] = {name: set() for name in modules}
    found: list[Import] = []
    for name, path in modules.items():
        for imp in imports_of(name, path, modules):
            found.append(imp)
            if imp.target in modules and imp.target != name:
                edges[name].add(imp.target)
    return edges, found


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _chain(edges: dict[str, set[str]], members: list[str]) -> list[str]:
    """The shortest circle through the component's first module, as a list of modules."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & inside):
                if child == start:
                    path = [start]
                    while node != start:
                        path.append(node)
                        node = previous[node]
                    return [start, *reversed(path[1:]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return members


def circles(edges: dict[str, set[str]]) -> list[str]:
    return [
        " -> ".join(_chain(edges, members))
        + ("" if len(members) < 3 else f" (one of the circles among {', '.join(members)})")
        for members in _components(edges)
    ]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(found: Iterable[Import], modules: dict[str, Path]) -> list[str]:
    out: list[str] = []
    for imp in found:
        if imp.name is not None and _is_private(imp.name) and imp.target.startswith("labeler"):
            out.append(f"private name: {imp.module} imports {imp.name} from {imp.target} [line {imp.line}]")
        if imp.target in modules:
            parts = imp.target.split(".")
            for depth, part in enumerate(parts):
                owner = ".".join(parts[:depth])
                if _is_private(part) and not (imp.module == owner or imp.module.startswith(owner + ".")):
                    out.append(f"private module: {imp.module} imports {imp.target} [line {imp.line}]")
                    break
    return list(dict.fromkeys(out))


def page_imports(found: Iterable[Import]) -> list[str]:
    return [
        f"page import: {imp.module} imports {imp.target} [line {imp.line}]"
        for imp in found
        if (imp.module == PAGES or imp.module.startswith(PAGES + "."))
        and imp.target.split(".")[0] in PAGE_FORBIDDEN
    ]


FACES_FOR_ALL = ("labeler.cli", "labeler.app", "labeler.__main__")  # the faces: they may import any package's face


def reexports(package: str, modules: dict[str, Path]) -> set[str]:
    """The names a package's ``__init__`` takes from its own submodules (its face's re-exports)."""
    path = modules[package]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.level == 1
            and node.module for alias in node.names}


def face_imports(found: Iterable[Import], modules: dict[str, Path]) -> list[str]:
    """Library code imports submodules, not package faces: ``from ..labels import golden_labels``
    names labels/ where ``from ..labels.consolidate import golden_labels`` names the module that
    defines it. A re-exported name taken from another package's face is a finding, and so is a
    face imported as a namespace (``from .. import metrics as m``) when that face only re-exports;
    a package whose ``__init__`` defines what is used (privacy/, ingest/formats/) is its own module.
    The faces (cli/, app/, the ``labeler`` package) may take names from any face."""
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    defines = {name: any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in ast.parse(
        modules[name].read_text(encoding="utf-8")).body) for name in packages}
    faces = {name: reexports(name, modules) for name in packages}  # each __init__ read once
    out: list[str] = []
    for imp in found:
        if imp.module == "labeler" or imp.module.startswith(FACES_FOR_ALL) or not imp.target.startswith("labeler."):
            continue
        # a module of the package itself, or a package's face taking its own subpackage
        own = imp.module == imp.target or imp.module.startswith(imp.target + ".") or imp.target.startswith(
            imp.module + ".")
        if own or imp.target not in packages:
            continue
        if imp.name is not None and imp.name in faces[imp.target]:
            out.append(f"face import: {imp.module} takes {imp.name} from the face of {imp.target} [line {imp.line}]")
        elif imp.name is None and not defines[imp.target]:
            out.append(f"face import: {imp.module} imports the face of {imp.target} [line {imp.line}]")
    return list(dict.fromkeys(out))


def floor_of(module: str) -> int:
    if module in FACE_FLOORS:
        return [name for name, _ in FLOORS].index(FACE_FLOORS[module])
    best, best_len = -1, -1
    for number, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = number, len(prefix)
    return best


def upward_arrows(edges: dict[str, set[str]]) -> list[str]:
    out = []
    for module in sorted(edges):
        for target in sorted(edges[module]):
            low, high = floor_of(module), floor_of(target)
            if high > low:
                out.append(
                    f"upward arrow: {module} ({FLOORS[low][0]}) -> {target} ({FLOORS[high][0]})"
                )
    return out


@functools.cache
def findings() -> dict[str, list[str]]:
    modules = all_modules()
    edges, found = graph(modules)
    return {
        "circles": circles(edges),
        "private": private_imports(found, modules),
        "pages": page_imports(found),
        "faces": face_imports(found, modules),
        "floors": upward_arrows(edges),
    }


def test_every_module_has_a_floor():
    unplaced = [name for name in all_modules() if floor_of(name) < 0]
    assert not unplaced, "modules on no floor (add them to FLOORS): " + ", ".join(unplaced)


def test_no_import_circles():
    found = findings()["circles"]
    assert not found, "import circles:\n" + "\n".join(found)


def test_no_private_imports():
    found = findings()["private"]
    assert not found, "\n".join(found)


def test_library_code_imports_submodules_not_package_faces():
    found = findings()["faces"]
    assert not found, "\n".join(found)


def test_pages_import_no_store_or_model_libraries():
    found = findings()["pages"]
    assert not found, "\n".join(found)


def test_core_imports_nothing_from_labeler_but_its_errors():
    """The ground floor stands alone: core/ imports the standard library, third parties, itself and
    the error family (errors.py, beside it on the same floor), nothing else from labeler."""
    modules = all_modules()
    _, found = graph(modules)
    wrong = [f"{imp.module} imports {imp.target} [line {imp.line}]" for imp in found
             if imp.module.startswith("labeler.core") and imp.target.startswith("labeler")
             and not imp.target.startswith(("labeler.core", "labeler.errors"))]
    assert not wrong, "\n".join(wrong)


def test_no_arrow_points_up_a_floor():
    found = findings()["floors"]
    assert not found, "\n".join(found)



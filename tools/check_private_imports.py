"""The two import rules import-linter does not express (docs/architecture.md, "Import rules"):
no module uses another module's private (``_underscore``) name, and no cycle among the imports
that run when a module is imported; ``python tools/check_private_imports.py [PATH ...]``
(default ``src bench tests conformance examples``) prints each report with its file:line and
exits 1 if there is any. Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("src", "bench", "tests", "conformance", "examples")
#: ``try`` statements (``try``/``except*`` is its own node from Python 3.11 on)
TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))


def is_private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (dunder) and ``_`` alone are not."""
    return (
        name.startswith("_")
        and not (name.startswith("__") and name.endswith("__"))
        and (name != "_")
    )


def module_name(path: Path) -> str:
    """The dotted name ``path`` is imported as: its directories up to the first one without an
    ``__init__.py`` (that one is the ``sys.path`` entry)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    directory = path.parent
    while (directory / "__init__.py").is_file():
        parts.insert(0, directory.name)
        directory = directory.parent
    return ".".join(parts)


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module


@dataclass
class Report:
    private: list[str] = field(default_factory=list)
    cycles: list[str] = field(default_factory=list)


def load(paths: Iterable[Path]) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            if any(part.startswith(".") for part in path.parts):
                continue
            name = module_name(path)
            if not name:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            modules[name] = Module(name, path, path.name == "__init__.py", tree)
    return modules


def resolve_from(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module name ``node`` imports from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    # a package's own name is its base for level 1; a plain module's is its parent
    drop = node.level - 1 if module.is_package else node.level
    base = base[: len(base) - drop] if drop else base
    return ".".join([*base, node.module] if node.module else base)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when the module is imported."""
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(stmt, ast.If):
            if not is_type_checking(stmt.test):
                yield from import_time_imports(stmt.body)
            yield from import_time_imports(stmt.orelse)
        elif isinstance(stmt, ast.ClassDef):
            yield from import_time_imports(stmt.body)
        elif isinstance(stmt, TRY):
            yield from import_time_imports(stmt.body)
            for handler in stmt.handlers:
                yield from import_time_imports(handler.body)
            yield from import_time_imports(stmt.orelse)
            yield from import_time_imports(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            yield from import_time_imports(stmt.body)
            yield from import_time_imports(stmt.orelse if hasattr(stmt, "orelse") else [])
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                yield from import_time_imports(case.body)


def inside(importer: str, package: str) -> bool:
    return importer == package or importer.startswith(package + ".")


def private_module_use(importer: str, target: str) -> str | None:
    """The private component of ``target`` that ``importer`` may not reach, if any: ``a._b.c``
    is fine from inside ``a`` (``a``'s own private module) and flagged from elsewhere."""
    parts = target.split(".")
    for index, part in enumerate(parts):
        if index and is_private(part) and not inside(importer, ".".join(parts[:index])):
            return ".".join(parts[: index + 1])
    return None


def private_reach(
    importer: str, node: ast.Attribute, module_names: dict[str, str], modules: dict[str, Module]
) -> str | None:
    """The private dotted name ``node`` (``m._x``, ``m.sub._x``, ``m.Class._x``) reaches, when
    ``m`` names a first-party module and ``importer`` may not reach it; else None."""
    chain = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        chain.insert(0, value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or value.id not in module_names:
        return None
    owner = module_names[value.id]
    while len(chain) > 1 and f"{owner}.{chain[0]}" in modules:
        owner = f"{owner}.{chain.pop(0)}"
    target = ".".join([owner, *chain])
    if target in modules:  # a private module: its own package may use it
        return private_module_use(importer, target)
    return target if owner != importer and owner in modules else None


def check_private(modules: dict[str, Module]) -> list[str]:
    """Uses of private names of first-party modules (those of the scanned trees).

    Flagged: ``from m import _x``; ``import m._x`` / ``from m._x import y`` when ``m._x`` is a
    private *module* and the importer is not inside ``m`` (a package may use its own private
    modules); ``m._x`` / ``m.sub._x`` / ``getattr(m, "_x")`` / ``monkeypatch.setattr(m, "_x",
    v)`` on a name bound (anywhere in the file) by ``import m`` / ``import m as n`` / ``from p
    import m``. Dunder names are public. Private members of objects (``saver._call``) need
    types to see and are not checked. The fix is on the side of the module that owns the
    name: give it a public name, or move it to where its users are.
    """
    roots = {m.split(".", 1)[0] for m in modules}
    found: list[str] = []

    def owned(name: str) -> bool:
        return name.split(".", 1)[0] in roots

    for module in modules.values():
        where = module.path.relative_to(ROOT) if module.path.is_relative_to(ROOT) else module.path
        # names bound to first-party modules anywhere in this file (import m / from p import m)
        module_names: dict[str, str] = {}
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if not owned(alias.name):
                        continue
                    if alias.asname:
                        module_names[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".", 1)[0]
                        module_names[root] = root
                    bad = private_module_use(module.name, alias.name)
                    if bad:
                        found.append(f"{where}:{alias.lineno}: imports private module {bad}")
            elif isinstance(node, ast.ImportFrom):
                source = resolve_from(module, node)
                if not owned(source):
                    continue
                bad = private_module_use(module.name, source)
                if bad:
                    found.append(f"{where}:{node.lineno}: imports from private module {bad}")
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    if target in modules:
                        module_names[alias.asname or alias.name] = target
                        bad = private_module_use(module.name, target)
                        if bad and not private_module_use(module.name, source):
                            found.append(f"{where}:{alias.lineno}: imports private module {bad}")
                    elif is_private(alias.name) and source != module.name:
                        found.append(
                            f"{where}:{alias.lineno}: imports private name {alias.name} "
                            f"from {source}"
                        )

        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                bad = private_reach(module.name, node, module_names, modules)
                if bad:
                    found.append(f"{where}:{node.lineno}: reads private name {bad}")
            elif isinstance(node, ast.Call) and len(node.args) >= 2:
                # getattr(m, "_x"), setattr / monkeypatch.setattr(m, "_x", v), hasattr, delattr
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                name = node.args[1]
                if (
                    called in {"getattr", "setattr", "hasattr", "delattr"}
                    and isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and is_private(name.value)
                ):
                    reached = ast.Attribute(value=node.args[0], attr=name.value, ctx=ast.Load())
                    bad = private_reach(module.name, reached, module_names, modules)
                    if bad:
                        found.append(f"{where}:{node.lineno}: {called} of private name {bad}")
    return sorted(set(found), key=sort_key)


def sort_key(line: str) -> tuple[str, int, str]:
    path, number, rest = line.split(":", 2)
    return path, int(number), rest


def import_graph(modules: dict[str, Module]) -> dict[str, dict[str, int]]:
    """``graph[a][b]``: the line of ``a``'s first import-time import of ``b``.

    Import time is the module body, including ``if``/``try``/``with`` blocks and class bodies,
    but not functions or ``if TYPE_CHECKING:``. ``from p import x`` is an edge to ``p.x`` when
    that is a module, else to ``p``. import-linter's ``acyclic_siblings`` contract sees cycles
    between the children of a package (counting imports in functions too) but not a package's
    ``__init__`` importing a child that imports the package back: this graph sees both.
    """
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for module in modules.values():
        edges = graph[module.name]
        for node in import_time_imports(module.tree.body):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                source = resolve_from(module, node)
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    targets.append(target if target in modules else source)
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module.name:
                    edges.setdefault(target, node.lineno)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
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
                    work.append((child, iter(sorted(graph[child]))))
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
                components.append(sorted(component))
    return sorted(components)


def one_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[0] != start:
                        path.insert(0, previous[path[0]])
                    return [*path, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start, start]


def check_cycles(modules: dict[str, Module]) -> list[str]:
    graph = import_graph(modules)
    found = []
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        cycle = one_cycle(graph, component)
        steps = []
        for importer, imported in zip(cycle, cycle[1:], strict=False):
            path = modules[importer].path
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            steps.append(f"    {where}:{graph[importer][imported]}: {importer} -> {imported}")
        found.append(
            f"import cycle among {len(component)} modules ({', '.join(component)}):\n"
            + "\n".join(steps)
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories to scan")
    parser.add_argument("--graph", action="store_true", help="print the import-time graph")
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / p for p in DEFAULT_PATHS if (ROOT / p).exists()]
    modules = load(p.resolve() for p in paths)
    if args.graph:
        for importer, edges in sorted(import_graph(modules).items()):
            for imported, number in sorted(edges.items()):
                print(f"{importer} -> {imported}  (line {number})")
        return 0
    private = check_private(modules)
    cycles = check_cycles(modules)
    for line in private:
        print(line)
    for text in cycles:
        print(text)
    if private or cycles:
        print(
            f"{len(private)} private-name import(s), {len(cycles)} import cycle(s) "
            f"in {len(modules)} modules"
        )
        return 1
    print(f"no private-name imports, no import cycles in {len(modules)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

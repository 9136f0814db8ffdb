"""The package's import graph in figures (issue 40, item 5), to compare a tree before and after a change.

    python3 bench/import_graph.py [--src OTHER/src/python] [--list]

Read from the source (ast), nothing imported: each module of MSUnmerged and the modules of the package it imports,
at module level or inside a function (`lazy`; imports under `if TYPE_CHECKING:` are left out). An import of a
package's name that is a module (`from MSUnmerged.ledger import fences`) is an arrow to that module, else to the
package's __init__; an arrow to a module inside a package is also one to the package's __init__ (it runs first),
but from a module inside that package. Figures: modules, arrows (module level, lazy), the import cycles (strongly connected sets of
modules, with the lazy arrows and without), the arrows in a cycle (from A to B where B reaches A), the arrows that
run back up (the lazy ones among those: how a cycle is kept from failing at import time), the largest
fan-out and fan-in, and the places outside ledger/ that reach into a ledger's database (`ledger.base.db` or a
collection). One JSON line; `--list` also prints the arrows running up, the cycles and the `ledger.base.db` uses.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Iterator

PACKAGE = "MSUnmerged"
# A ledger's database or collections, through its shared base (or, before issue 40's parts, directly).
LEDGER_DB = re.compile(r"\bledger\.(?:db|base\.(?:db|rses|buckets|files|dirs|jobs|cycles|meta|fences))\b")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(tree: ast.Module, name: str, is_package: bool) -> Iterator[tuple[str, bool]]:
    """(imported name, lazy) for each import of the module, relative ones made absolute."""
    def walk(node: ast.AST, lazy: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
            if isinstance(child, ast.Import):
                yield from ((alias.name, lazy) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = name.split(".")[:len(name.split(".")) - child.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                yield from ((f"{base}.{alias.name}", lazy) for alias in child.names)
            else:
                yield from walk(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    yield from walk(tree, False)


def graph(root: Path) -> tuple[dict[str, dict[str, bool]], dict[str, int]]:
    """Arrows {module: {imported module: lazy (no module-level import of it)}}, and `ledger.base.db` uses per module
    outside ledger/."""
    files = {module_name(root, p): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    arrows: dict[str, dict[str, bool]] = {}
    reaches: dict[str, int] = {}
    for name, path in files.items():
        text = path.read_text()
        out: dict[str, bool] = {}
        for target, lazy in imports(ast.parse(text), name, path.name == "__init__.py"):
            found = target if target in files else target.rpartition(".")[0]
            # Importing a.b.c runs a/__init__ and a/b/__init__ first, unless the importer is inside them already.
            parts = found.split(".")
            for target_module in (".".join(parts[:i]) for i in range(2, len(parts) + 1)):
                if target_module in files and target_module != name and not name.startswith(target_module + "."):
                    out[target_module] = out.get(target_module, True) and lazy
        arrows[name] = out
        if not name.startswith(f"{PACKAGE}.ledger") and LEDGER_DB.search(text):
            reaches[name] = len(LEDGER_DB.findall(text))
    return arrows, reaches


def cycles(arrows: dict[str, dict[str, bool]], with_lazy: bool) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w, lazy in arrows[v].items():
            if lazy and not with_lazy:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(arrows):
        if v not in index:
            visit(v)
    return sorted(out)


def reachable(arrows: dict[str, dict[str, bool]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in arrows[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src" / "python"),
                   help="the src/python folder of the tree to read (default: this checkout's)")
    p.add_argument("--list", action="store_true", help="also print the arrows running up and the cycles")
    args = p.parse_args()
    arrows, reaches = graph(Path(args.src))
    in_cycles = sorted((a, b, lazy) for a, out in arrows.items() for b, lazy in out.items()
                       if a in reachable(arrows, b))
    up = [(a, b) for a, b, lazy in in_cycles if lazy]
    fan_in: dict[str, int] = {}
    for out in arrows.values():
        for b in out:
            fan_in[b] = fan_in.get(b, 0) + 1
    top_out = max(arrows, key=lambda m: len(arrows[m]))
    top_in = max(fan_in, key=lambda m: fan_in[m])
    print(json.dumps({
        "bench": "import_graph", "modules": len(arrows),
        "arrows": sum(len(out) for out in arrows.values()),
        "arrows_lazy": sum(lazy for out in arrows.values() for lazy in out.values()),
        "cycles": len(cycles(arrows, True)), "cycles_module_level": len(cycles(arrows, False)),
        "modules_in_cycles": sum(len(c) for c in cycles(arrows, True)),
        "arrows_in_cycles": len(in_cycles), "arrows_up": len(up),
        "fan_out_max": [top_out, len(arrows[top_out])], "fan_in_max": [top_in, fan_in[top_in]],
        "ledger_db_outside_ledger": sum(reaches.values())}))
    if args.list:
        for a, b in up:
            print(f"up: {a} -> {b}")
        for group in cycles(arrows, True):
            print(f"cycle: {' '.join(group)}")
        for name, n in sorted(reaches.items()):
            print(f"ledger.base.db: {name} x{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

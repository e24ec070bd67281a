"""The layer order of aotc, read from the import graph: no module imports from a layer above its own.

The data flows one way: ir <- patterns <- importers / hlo_passes <- fusion <- kernels <-
package <- compiler <- bench / debug / cli, where importers and hlo_passes are siblings that never
import each other (a model comes in, then passes run on the graph). Every import counts
wherever it is written (module level, inside a function, under TYPE_CHECKING,
`__import__("...")`), since a function-level import that dodges a cycle is still a cycle.
`from aotc import __version__` reads the ir-level version string; the `aotc` package itself
(its lazy `aotc.compile`, `aotc.Engine`) is the public facade at the top.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("ir", "patterns", "importers", "hlo_passes", "fusion", "kernels", "package", "compiler", "top")
RANK = {layer: i for i, layer in enumerate(LAYERS)}
RANK["hlo_passes"] = RANK["importers"]          # siblings: the same rank, and neither imports the other
# module name (or its package prefix) -> layer; the longest match wins ("aotc" itself: only the package)
PLACES = {
    "aotc.__version__": "ir", "aotc.errors": "ir", "aotc.ir": "ir",
    "aotc.patterns": "patterns",
    "aotc.importers": "importers",
    "aotc.hlo_passes": "hlo_passes",
    "aotc.fusion": "fusion",
    "aotc.kernels": "kernels",
    "aotc.package": "package", "aotc.testing": "package", "aotc.serving": "package", "aotc.profile": "package",
    "aotc.compiler": "compiler", "aotc.demo": "compiler",
    "aotc.bench": "top", "aotc.debug": "top", "aotc.cli": "top", "cli": "top", "aotc": "top",
}
# what loading an engine may pull in: no importer, pass, fusion or codegen (serving code imports aotc.Engine)
RUNTIME = ("aotc.package.runtime_binding", "aotc.package.c_build", "aotc.package.engine_format", "aotc.package.plan",
           "aotc.package.plan_section",
           "aotc.package.inspect")
# The one door from the runtime side to a compiler: the cpu device's host library, built on an engine's
# first cpu run when the engine does not embed it (aotc/package/host_on_demand.py); cuda runs never open it.
ON_DEMAND = "aotc.package.host_on_demand"
RUNTIME_MAY_REACH = ("aotc.errors", "aotc.ir", "aotc.__version__", "aotc.kernels.resources", ON_DEMAND) + RUNTIME
OURS = ("aotc", "cli")
# layers whose modules still import each other in a cycle (importers: the converter modules and the
# importer that loads them, which control-flow converters call back for subgraphs; ir: graph and the op
# table; top: the cli and its subcommands); every other layer, kernels included, must stay acyclic
CYCLIC_LAYERS = ("ir", "importers", "top")


def layer_of(module: str) -> str | None:
    """The layer of a module or name, None for a module no layer holds (a new top-level module)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if n == 1 and parts[0] == "aotc" and len(parts) > 1:
            return None
        place = PLACES.get(".".join(parts[:n]))
        if place:
            return place
    return None


def find_modules(root: Path) -> dict[str, Path]:
    """Module name -> file for every .py file of aotc/ and cli/ under `root`."""
    found = {}
    for top in OURS:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(line, imported module or name) for every import in the tree, function-level ones included."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                yield node.lineno, (base, alias.name)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                yield node.lineno, node.args[0].value


def import_graph(root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    """Module -> [(line, our module it imports)]; `from m import name` is m.name when that is a module
    (or a placed name such as aotc.__version__), else m."""
    modules = find_modules(root)
    graph = {}
    for module, path in modules.items():
        edges = []
        for line, target in _imports(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"):
            if isinstance(target, tuple):
                base, name = target
                full = f"{base}.{name}"
                target = full if full in modules or full in PLACES else base
            if target.split(".")[0] in OURS:
                edges.append((line, target))
        graph[module] = edges
    return graph


def violations(root: Path = ROOT) -> list[str]:
    """Each import of a module from a layer above the importer's own, as 'file:line: ...'."""
    out = []
    for module, edges in import_graph(root).items():
        mine = layer_of(module)
        if mine is None:            # test_every_module_has_a_layer names it
            continue
        for line, target in edges:
            theirs = layer_of(target)
            if theirs is not None and (RANK[theirs] > RANK[mine] or (RANK[theirs] == RANK[mine] and theirs != mine)):
                out.append(f"{module}:{line} ({mine}) imports {target} ({theirs})")
    return out


def reach(graph, starts) -> set[str]:
    """Every module the `starts` import, directly or not."""
    seen, stack = set(starts), list(starts)
    while stack:
        for _, target in graph.get(stack.pop(), []):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_every_module_has_a_layer():
    unplaced = [m for m in find_modules(ROOT) if layer_of(m) is None]
    assert not unplaced, f"place these modules in a layer (tests/test_layering.py PLACES): {unplaced}"
    assert "aotc.fusion.regions" in find_modules(ROOT) and "aotc.kernels.codegen" in find_modules(ROOT)
    assert layer_of("aotc") == "top" and layer_of("aotc.__version__") == "ir" and layer_of("aotc.limits") is None


def test_no_module_imports_from_a_layer_above_its_own():
    found = violations()
    assert not found, "imports against the layer order:\n" + "\n".join(found)


def test_the_runtime_side_reaches_no_compiler_stage():
    graph = import_graph()
    assert all(m in graph for m in RUNTIME)
    beyond_the_door = {ON_DEMAND: []}
    stray = sorted(m for m in reach({**graph, **beyond_the_door}, RUNTIME)
                   if not any(m == ok or m.startswith(ok + ".") for ok in RUNTIME_MAY_REACH))
    assert not stray, f"loading an engine pulls in {stray}"
    assert {t for _, t in graph[ON_DEMAND]} <= {"aotc.errors", "aotc.kernels.host_compile",
                                                "aotc.package.engine_format"}


def test_fusion_reaches_no_kernel_module():
    graph = import_graph()
    fusion = [m for m in graph if layer_of(m) == "fusion"]
    assert "aotc.fusion.rules" in fusion
    assert not sorted(m for m in reach(graph, fusion) if m.startswith("aotc.kernels"))


def test_package_code_generates_no_kernels():
    """The compiler generates the kernels and hands them to the package stage (launch_plan.build_launches)."""
    graph = import_graph()
    calls = [f"{m}:{line} imports {t}" for m, edges in graph.items() if layer_of(m) == "package"
             for line, t in edges if t.startswith("aotc.kernels.codegen")]
    assert not calls


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    adj = {m: sorted({t for _, t in edges if t in graph and t != m}) for m, edges in graph.items()}
    index, low, stack, on, cycles = {}, {}, [], set(), []
    for start in adj:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            if i < len(adj[v]):
                work.append((v, i + 1))
                w = adj[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return cycles


def test_import_cycles_stay_inside_the_layers_that_still_have_them():
    """A function-level import that dodges a cycle is a cycle: fusion, patterns, the passes, the package
    stage and the compiler have none."""
    cycles = import_cycles(import_graph())
    stray = [c for c in cycles if not all(layer_of(m) in CYCLIC_LAYERS for m in c)]
    assert not stray, f"import cycles: {stray}"


def test_import_cycles_are_found():
    graph = {"a": [(1, "b")], "b": [(1, "c")], "c": [(1, "a"), (2, "d")], "d": [], "e": [(1, "e")]}
    assert import_cycles(graph) == [["a", "b", "c"]]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_function_level_back_edge_is_caught(tmp_path):
    root = _tree(tmp_path, {
        "aotc/__init__.py": "__version__ = '0'\n",
        "aotc/fusion/__init__.py": "",
        "aotc/fusion/prologues.py": "from aotc import __version__\n\n\ndef fits(n):\n"
                                   "    from aotc.kernels import codegen\n    return codegen\n",
        "aotc/kernels/__init__.py": "",
        "aotc/kernels/codegen.py": "from aotc.fusion import prologues\n",
    })
    assert violations(root) == ["aotc.fusion.prologues:5 (fusion) imports aotc.kernels.codegen (kernels)"]


def test_relative_dynamic_and_sibling_imports_count(tmp_path):
    root = _tree(tmp_path, {
        "aotc/__init__.py": "",
        "aotc/ir/__init__.py": "",
        "aotc/ir/graph.py": "from ..package import plan\n",
        "aotc/package/__init__.py": "",
        "aotc/package/plan.py": "",
        "aotc/hlo_passes/__init__.py": "",
        "aotc/hlo_passes/cse.py": "import importlib\nm = importlib.import_module('aotc.compiler')\n",
        "aotc/compiler.py": "",
        "aotc/importers/__init__.py": "",
        "aotc/importers/onnx.py": "from aotc.hlo_passes import cse\nfrom aotc.ir import graph\n",
    })
    assert sorted(violations(root)) == ["aotc.hlo_passes.cse:2 (hlo_passes) imports aotc.compiler (compiler)",
                                        "aotc.importers.onnx:1 (importers) imports aotc.hlo_passes.cse (hlo_passes)",
                                        "aotc.ir.graph:1 (ir) imports aotc.package.plan (package)"]

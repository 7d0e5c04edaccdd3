"""The package's import arrows all point down: every module of ``insnet_fairseq`` has a layer, and imports
(at any depth, function-local ones included) only from its own layer or the layers below it.

Read from the source with ``ast`` (nothing is imported), so a back-edge fails here even where it hides inside a
function. The layers, bottom up:

0. ``geometry`` (pure tensor functions: orders, offsets, masks, layer arithmetic), ``data`` (datasets and the
   parses they read; they use geometry's orders), ``errors`` (the error classes: every layer raises them, so
   they import nothing of the package), ``checkpoint_safety`` (the weights-only loader; it imports only errors)
   and ``measure`` (counters of decoder passes and host syncs, for the tests and the benchmarks; nothing of the
   package either);
1. ``modules``: the context encoder's building blocks (attention, slot heads, the offset kernel);
2. ``models``: the registered fairseq models built from them;
3. ``decoding`` (generators, reranking, the hub interface), ``training`` (the model passes that make training
   trajectories: Dinic layerings, searched orders, on-policy rollouts) and ``reference`` (the naive procedures the
   tests compare the models with);
4. ``tasks`` (the registered tasks and criteria, the model/checkpoint checks, the one-line errors of the package's
   tasks) and ``fairseq_fixes`` (fixes of named bugs of the pinned fairseq, installed on import: the
   fairseq-interactive one screens inputs as decoding does, and nothing below imports them);
5. the package itself (``insnet_fairseq/__init__.py``), which imports everything to register it.
"""
import ast
import pathlib
from typing import Dict, Iterator, List, Optional, Tuple

PACKAGE = "insnet_fairseq"
ROOT = pathlib.Path(__file__).resolve().parents[2] / PACKAGE

LAYERS = {
    "insnet_fairseq.errors": 0,
    "insnet_fairseq.checkpoint_safety": 0,
    "insnet_fairseq.measure": 0,
    "insnet_fairseq.geometry": 0,
    "insnet_fairseq.data": 0,
    "insnet_fairseq.modules": 1,
    "insnet_fairseq.models": 2,
    "insnet_fairseq.decoding": 3,
    "insnet_fairseq.training": 3,
    "insnet_fairseq.reference": 3,
    "insnet_fairseq.tasks": 4,
    "insnet_fairseq.fairseq_fixes": 4,
    "insnet_fairseq.flag_reference": 4,  # the flag reference's generator reads the tasks' and models' options
}
TOP = 5  # the package's __init__


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer(module: str) -> Optional[int]:
    """The layer of ``module`` (its longest prefix in :data:`LAYERS`), or None when it has none."""
    if module == PACKAGE:
        return TOP
    parts = module.split(".")
    for k in range(len(parts), 1, -1):
        key = ".".join(parts[:k])
        if key in LAYERS:
            return LAYERS[key]
    return None


def imports(module: str, path: pathlib.Path, known) -> Iterator[Tuple[str, int]]:
    """(imported module of the package, line) for every import statement of ``path``, at any depth.

    ``from a.b import c`` imports ``a.b.c`` where that is a module of the package, else ``a.b``."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield (sub if sub in known else source), node.lineno


def edges() -> List[Tuple[str, str, int]]:
    known = modules()
    return [(m, target, line) for m, p in known.items() for target, line in imports(m, p, known)]


def test_every_module_has_a_layer():
    missing = [m for m in modules() if layer(m) is None]
    assert not missing, f"modules without a layer (add them to LAYERS): {missing}"


def test_no_module_imports_from_a_layer_above_it():
    known = modules()
    back = [f"{known[m].relative_to(ROOT.parent)}:{line}: {m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
            for m, t, line in edges() if layer(t) is not None and layer(m) is not None and layer(t) > layer(m)]
    assert not back, "imports from a layer above:\n" + "\n".join(back)


def test_imports_name_modules_that_exist():
    known = modules()
    unknown = sorted({f"{m} imports {t} (line {line})" for m, t, line in edges() if t not in known})
    assert not unknown, "imports of modules that do not exist:\n" + "\n".join(unknown)


def test_no_import_cycles():
    """No cycle of module imports, even within a layer: a cycle needs an import hidden in a function to load."""
    graph: Dict[str, set] = {}
    for m, t, _ in edges():
        if t != m:
            graph.setdefault(m, set()).add(t)
    # Tarjan's strongly connected components; a component of two or more modules is a cycle
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_function_local_back_edges(tmp_path):
    """An import inside a function counts as much as one at the top: the way a cycle used to be dodged."""
    fake = tmp_path / "insnet.py"
    fake.write_text("def f():\n    from insnet_fairseq.tasks.translation import InsertionTranslationTask\n")
    found = list(imports("insnet_fairseq.models.insnet", fake, modules()))
    assert found == [("insnet_fairseq.tasks.translation", 2)]
    assert layer(found[0][0]) > layer("insnet_fairseq.models.insnet")


# the decoding core (insnet_fairseq/decoding/__init__.py): sequential, parallel, beam and end-of-slot decoding
DECODING_CORE = {f"{PACKAGE}.decoding.{name}" for name in ("core_options", "step", "greedy", "beam", "gaps", "output",
                                                            "stopping", "word_rules", "state", "cache", "sampling")}


def test_the_decoding_core_imports_none_of_the_extras():
    """The core's modules import only each other (and the layers below): the extras (candidates, rerank, MBR,
    verification, templates, compiled passes) and the generator that joins them to the core are above it."""
    known = modules()
    assert DECODING_CORE <= set(known)
    up = [f"{m} imports {t} (line {line})" for m, t, line in edges()
          if m in DECODING_CORE and t.startswith(f"{PACKAGE}.decoding") and t not in DECODING_CORE]
    assert not up, "the decoding core imports beyond it:\n" + "\n".join(up)

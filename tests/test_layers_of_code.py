"""The package's modules in layers that only point down: the library, then configs, store and
trainer, then the experiments, then the runner, then the chapters, the landing page and the book. No
import circle, and no import inside a function to dodge one."""
import ast
from pathlib import Path

import recdrop

ROOT = Path(recdrop.__file__).parent
# From the bottom; a module may import its own layer's and those below.
LAYERS = [
    {"paths", "masks", "cells", "cpu_products", "cpu_kernels", "fused", "triton_kernels", "graphs", "layers", "memory",
     "models", "optim", "paper", "route", "stacked", "step_graph", "updates"},
    {"config", "records", "store", "estimates", "progress", "train", "verdicts", "report", "ablations", "perf",
     "figure1", "demo", "data"},  # data: its checksums and writes
    {"experiments"},
    {"runner", "sweep", "campaign"},
    {"chapters"},
    {"book", "summary"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def modules():
    """Each module's dotted name (``recdrop.x.y``) -> its parsed source."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text()))
    return out


def imports(name, path, tree):
    """The recdrop modules ``name`` imports at any depth of its source, each with whether the import is
    inside a function."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("recdrop")):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            # ``from .experiments import seeds`` imports the module experiments.seeds where there is one
            names = [target] + [f"{target}.{a.name}" for a in node.names]
            found += [(t, id(node) in inside) for t in names if t != package]
        elif isinstance(node, ast.Import):
            found += [(a.name, id(node) in inside) for a in node.names if a.name.startswith("recdrop")]
    return found


def top(name):
    """The layer name of a module: ``recdrop.experiments.word_lm`` -> ``experiments``."""
    return name.split(".")[1] if name.count(".") else "recdrop"


def test_every_module_has_a_layer():
    assert {top(m) for m in modules()} - {"recdrop"} <= set(LAYER)


def test_imports_only_point_down_and_none_hides_inside_a_function():
    mods = modules()
    up, hidden = [], []
    for name, (path, tree) in mods.items():
        for target, in_function in imports(name, path, tree):
            if target not in mods or top(target) == "recdrop":
                continue
            if in_function:
                hidden.append(f"{name} -> {target}")
            if top(name) != "recdrop" and LAYER[top(target)] > LAYER[top(name)]:
                up.append(f"{name} -> {target}")
    assert not up, f"imports that point up: {up}"
    assert not hidden, f"imports inside a function: {hidden}"


def test_an_experiments_task_never_reads_its_chapter():
    """Within the experiments, a task (``experiments.word_lm``) is below its chapter
    (``experiments.word_lm_chapter``): what trains a run never depends on how its results are shown."""
    mods = modules()
    chapters = {m for m in mods if m.startswith("recdrop.experiments.") and m.endswith("_chapter")}
    assert {"recdrop.experiments.word_lm_chapter", "recdrop.experiments.char_lm_chapter"} <= chapters
    up = [f"{name} -> {target}" for name, (path, tree) in mods.items()
          if name.startswith("recdrop.experiments.") and name not in chapters
          for target, _ in imports(name, path, tree) if target in chapters]
    assert not up, f"tasks that import a chapter: {up}"


def test_no_import_circle():
    mods = modules()
    edges = {name: {t for t, _ in imports(name, *mods[name]) if t in mods and t != name and top(t) != "recdrop"}
             for name in mods}
    state, circles = {}, []

    def visit(u, stack):
        state[u] = "open"
        stack.append(u)
        for v in edges[u]:
            if state.get(v) == "open":
                circles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v, stack)
        stack.pop()
        state[u] = "done"
    for name in mods:
        if name not in state:
            visit(name, [])
    assert not circles, circles


def test_the_library_speaks_of_what_and_why_never_of_when():
    """No commit hash, date or tracker issue in ``recdrop/``'s comments and docstrings: history lives in
    commit messages, measurements in ``data/benchmarks/``."""
    import io
    import re
    import tokenize

    pattern = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|\b20\d\d-\d\d-\d\d\b|\bissue \d+",
                         re.IGNORECASE)
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
        for i, tok in enumerate(tokens):
            docstring = (tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))
                         and (i == 0 or tokens[i - 1].type in (tokenize.INDENT, tokenize.NEWLINE, tokenize.NL)))
            if (tok.type == tokenize.COMMENT or docstring) and pattern.search(tok.string):
                found.append(f"{path.relative_to(ROOT.parent)}:{tok.start[0]}: {pattern.search(tok.string).group(0)}")
    assert not found, found


def defined_names(tree):
    """Every name a module defines: its functions, classes and methods, and what it assigns."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
    return out


def test_no_module_reaches_into_another_modules_underscored_names():
    """What one module needs of another is public: no import of an underscored name, and no use of an
    underscored attribute that only another module of the package defines (torch's own are torch's, and a
    subclass's ``self._x`` of its base class is its own)."""
    mods = modules()
    own = {name: defined_names(tree) for name, (_, tree) in mods.items()}
    everyone = set().union(*own.values())
    reached = []
    for name, (path, tree) in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("recdrop")):
                reached += [f"{name}: imports {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
            elif (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                  and node.attr in everyone and node.attr not in own[name]
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                reached.append(f"{name}:{node.lineno}: .{node.attr}")
    assert not reached, f"underscored names used outside the module that defines them: {reached}"


def test_every_function_reads_in_one_screen():
    """At most 60 lines a function, its docstring included: a longer one is split into named parts."""
    long = [f"{name}.{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, (_, tree) in modules().items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert not long, f"functions over 60 lines: {long}"


def test_a_process_that_compiles_nothing_imports_neither_dynamo_nor_scipy_stats():
    # each takes seconds to import, and a sweep, a campaign or a resumed run starts many processes
    import subprocess
    import sys
    probe = ("import sys, torch, recdrop.campaign, recdrop.sweep\n"
             "from recdrop import LSTM\n"
             "y, _ = LSTM(8, 8, recurrent_dropout=0.25)(torch.randn(5, 3, 8)); y.sum().backward()\n"
             "print(sorted(m for m in ('torch._dynamo', 'scipy.stats') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_torch_load_reads_weights_only():
    """``torch.load`` unpickles arbitrary objects unless told ``weights_only=True``: every call in the
    package, its benchmarks, examples and tests says so."""
    calls = []
    for folder in ("recdrop", "benchmarks", "examples", "tests"):
        for path in (ROOT.parent / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                    named = {k.arg: k.value for k in node.keywords}
                    safe = isinstance(named.get("weights_only"), ast.Constant) and named["weights_only"].value is True
                    calls.append((f"{path.relative_to(ROOT.parent)}:{node.lineno}", safe))
    assert len(calls) >= 2  # the store's checkpoints and a test's: the scan finds them
    assert [where for where, safe in calls if not safe] == []

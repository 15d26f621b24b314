"""The package's layers, read from its imports with `ast` (every import, also inside functions).

    core      <- policies, machines, drain <- config <- store, sim <- pbs <- server <- cli, demos

(The config layer is config.py and sitefilter.py, the site's own Python hook.)

A layer imports only itself and the layers to its left; nothing imports in a cycle.
"""
import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hpcsched")

#: layer -> the layers it may import (besides itself); a module outside these is top level
MAY_IMPORT = {
    "core": set(),
    "policies": {"core"},
    "machines": {"core"},
    "drain": {"core"},
    "config": {"core", "policies", "machines"},
    "sim": {"core", "policies", "machines", "config", "drain"},
    "store": {"core", "policies", "machines", "config"},
    "pbs": {"core", "policies", "machines", "config", "store"},
    "server": {"core", "policies", "machines", "config", "store", "pbs", "drain"},
}


def modules() -> dict[str, str]:
    """dotted name (without `hpcsched.`) -> file, for every module of the package."""
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[name.removesuffix(".__init__") if name != "__init__" else ""] = path
    return found


def imports(name: str, path: str, known: dict[str, str]) -> set[str]:
    """The package's modules that `name` imports (a `from X import y` counts y if y is a
    module, else X)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            targets = [a.name.removeprefix("hpcsched.") for a in node.names if a.name.startswith("hpcsched.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "hpcsched" or node.module.startswith("hpcsched.")):
                stem = node.module.removeprefix("hpcsched").removeprefix(".")
            else:
                continue
            subs = [f"{stem}.{a.name}".strip(".") for a in node.names]
            targets = [s for s in subs if s in known] or [stem]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def layer(name: str) -> str:
    head = name.split(".")[0]
    if head == "sitefilter":
        return "config"
    return head if head in MAY_IMPORT else "top"


def dynamic(path: str) -> set[str]:
    """What a module imports by name at run time: `import_module(f"hpcsched.pbs.{module}")`
    reaches every module of the commands' table (front.COMMANDS, and cobalt.py for a
    Cobalt site's forms)."""
    calls = [n for n in ast.walk(ast.parse(open(path).read()))
             if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == "import_module"]
    if not any(isinstance(c.args[0], ast.JoinedStr) and isinstance(c.args[0].values[0], ast.Constant)
               and str(c.args[0].values[0].value).startswith("hpcsched.pbs.") for c in calls if c.args):
        return set()
    from hpcsched.pbs.front import COMMANDS
    return {f"pbs.{target.split(':')[0]}" for target in COMMANDS.values()} | {"pbs.cobalt"}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) | dynamic(path) for name, path in known.items()}


def test_every_import_goes_down_the_layers():
    wrong = []
    for name, targets in graph().items():
        mine = layer(name)
        if mine == "top":
            continue
        for t in targets:
            theirs = layer(t)
            if t and theirs != mine and theirs not in MAY_IMPORT[mine]:  # (the root holds the version)
                wrong.append(f"{name} ({mine}) imports {t or 'hpcsched'} ({theirs})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    edges = graph()
    # a package's __init__ importing its own submodules is how packages work, not a cycle
    for name in edges:
        edges[name] = {t for t in edges[name] if not (t == "" or name.startswith(t + "."))}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(w):] + [w]))
            if w not in state:
                visit(w)
        path.pop()
        state[v] = 2

    for v in sorted(edges):
        if v not in state:
            visit(v)


def test_the_front_doors_dispatch_is_read_as_imports_of_every_command():
    """front.py imports the command modules by name (run_here): the graph has those edges,
    so a command importing front back would be a cycle (they import client.py instead)."""
    edges = graph()
    assert {"pbs.qsub", "pbs.qstat", "pbs.maui", "pbs.psc", "pbs.cobalt"} <= edges["pbs.front"]
    for name in ("pbs.qsub", "pbs.psc", "pbs.cobalt"):
        assert "pbs.front" not in edges[name] and "pbs.client" in edges[name]


def test_the_reader_sees_imports_inside_functions_and_relative_forms(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "a").mkdir(parents=True)
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from ..b import y\n    from . import z\n")
    known = {"a": "", "a.x": "", "a.z": "", "b": ""}
    assert imports("a.x", str(pkg / "a" / "x.py"), known) == {"b", "a.z"}


def rebound(path: str) -> list[str]:
    """`module.name = ...` in `path` where `module` is one of the package's own: a module's
    state set from another (each as `line: target`)."""
    tree = ast.parse(open(path).read())
    mods = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            and (n.level or (n.module or "").startswith("hpcsched")) for a in n.names}
    mods |= {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names if a.name.startswith("hpcsched")}
    found = []
    for n in ast.walk(tree):
        targets = n.targets if isinstance(n, ast.Assign) else \
            [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in mods:
                    found.append(f"{n.lineno}: {ast.unparse(e)}")
    return found


def test_no_module_sets_another_modules_state():
    """A command's context (who calls, the script its client read, the server's bounds on
    it) is its Request (store/request.py), never another module's global set around it:
    `site.caller = ...` read by whoami() anywhere below."""
    wrong = [f"{name}:{where}" for name, path in modules().items() for where in rebound(path)]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_rebinding_reader_sees_tuples_and_aliases(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from . import common as c\nimport hpcsched.x\nfrom .site import whoami\n"
                    "c.a, b = 1, 2\nhpcsched.y = 3\nwhoami.z = 4\nlocal = object()\nlocal.w = 5\n")
    assert rebound(str(path)) == ["4: c.a", "5: hpcsched.y", "6: whoami.z"]

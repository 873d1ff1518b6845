"""The package's import structure: its floors and no import cycles (import-linter, with the
contracts in pyproject.toml), and no function-local import that hides a cycle.

Import-linter reads function-local imports too, so a local import cannot take a module
above its floor. Within a floor, a local import can still close a cycle that an import at
the top would make fail at import time; ``test_no_function_local_import_closes_a_cycle``
finds those: a local import of ``keras_vit.X`` in a module that ``X`` itself reaches,
through the imports the modules name.

And what importing costs: ``import keras_vit`` imports no backend until one of its names is
used, and ``keras-vit --help`` (with the commands whose modules allow it) none at all.
"""

import ast
import os
import shutil
import subprocess
import sys

import pytest
from helpers import floor_of, floors, once_on

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Function-local imports allowed to close a cycle: {(importer, imported): why}. None today;
# rather than adding one, move what both need down a floor, or import at the top.
CYCLES_ALLOWED = {}


def test_the_floors_hold_and_no_package_has_an_import_cycle():
    program = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    assert program, "lint-imports is not installed beside this Python: pip install -e '.[test]'"
    result = subprocess.run([program, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "Contracts: 2 kept, 0 broken." in report, report


def modules(root, package):
    """``{module name: file}`` of every module of ``package`` under ``root``."""
    found = {}
    for folder, _, names in os.walk(os.path.join(root, package)):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, root)[: -len(".py")].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def package_imports(root, package):
    """``{module: [(imported module, function-local?, line)]}`` for the imports of
    ``package``'s own modules: ``from a import b`` names ``a.b`` where that is a module, else ``a``."""
    files = modules(root, package)

    def imports(module, path):
        in_package = path.endswith("__init__.py")
        found = []

        def visit(node, local):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import):
                    found.extend((a.name, local, child.lineno) for a in child.names if a.name.split(".")[0] == package)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:  # relative: from the module's package, up level - 1
                        anchor = module.split(".")[: None if in_package else -1]
                        anchor = anchor[: len(anchor) - child.level + 1]
                        base = ".".join(anchor + [base] if base else anchor)
                    if base.split(".")[0] == package:
                        names = (f"{base}.{a.name}" for a in child.names)
                        found.extend((name if name in files else base, local, child.lineno) for name in names)
                visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        with open(path) as f:
            visit(ast.parse(f.read(), path), False)
        return found

    return {module: imports(module, path) for module, path in files.items()}


def cycle_closing_local_imports(root, package):
    """``{(importer, imported): line}`` of the function-local imports whose module reaches
    the importer back through the imports (top-level or local) the modules name."""
    graph = package_imports(root, package)

    def reaches(start, goal):
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module == goal:
                return True
            if module not in seen:
                seen.add(module)
                todo.extend(imported for imported, _, _ in graph.get(module, ()))
        return False

    return {
        (module, imported): line
        for module, found in graph.items()
        for imported, local, line in found
        if local and reaches(imported, module)
    }


def test_no_function_local_import_closes_a_cycle():
    found = cycle_closing_local_imports(ROOT, "keras_vit")
    unexplained = {edge: line for edge, line in found.items() if edge not in CYCLES_ALLOWED}
    assert not unexplained, (
        "these function-local imports close an import cycle (import at the top, after moving "
        f"what both modules need down a floor): {unexplained}"
    )
    assert set(CYCLES_ALLOWED) <= set(found), "CYCLES_ALLOWED names imports that no longer close a cycle"


def test_the_cycle_check_finds_a_cycle_a_local_import_hides(tmp_path):
    write = lambda name, text: (tmp_path / "pkg" / name).write_text(text)
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    write("__init__.py", "from pkg import front\n")
    write("front.py", "from pkg.sub import low\n")
    write("heavy.py", "")
    write("sub/__init__.py", "")
    write("sub/low.py", "def f():\n    from pkg import front, heavy\n    from .. import heavy\n")
    found = cycle_closing_local_imports(str(tmp_path), "pkg")
    assert found == {("pkg.sub.low", "pkg.front"): 2}  # heavy imports nothing back: a lazy import is fine
    imports = package_imports(str(tmp_path), "pkg")["pkg.sub.low"]
    assert imports == [("pkg.front", True, 2), ("pkg.heavy", True, 2), ("pkg.heavy", True, 3)]


def imported_test_modules(tests_dir):
    """{test file: the test_* modules it imports}: tests share code through the helper
    modules (helpers, upstream, npz_reference, http_server, conftest), never each other."""
    found = {}
    for name in sorted(os.listdir(tests_dir)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(tests_dir, name)) as f:
            tree = ast.parse(f.read())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
        imported = sorted(n for n in names if n.split(".")[0].startswith("test_"))
        if imported:
            found[name] = imported
    return found


def test_no_test_file_imports_another(tmp_path):
    assert imported_test_modules(os.path.dirname(os.path.abspath(__file__))) == {}
    # The check sees such an import.
    (tmp_path / "test_a.py").write_text("from test_b import thing\n")
    (tmp_path / "helpers.py").write_text("import numpy\n")
    assert imported_test_modules(str(tmp_path)) == {"test_a.py": ["test_b"]}


def upward_root_imports(root, package, front_door="factory"):
    """The root package's imports of modules above ``front_door``'s floor: the root is the
    front door's own floor, so those would run upward."""
    floor_list = floors(os.path.join(root, "pyproject.toml"))
    limit = floor_of(f"{package}.{front_door}", floor_list)
    found = package_imports(root, package)[package]
    return sorted({m for m, _, _ in found if m != package and floor_of(m, floor_list) < limit})


def root_namespace_uses(root, package):
    """``{module: line}`` of the package's modules that import the package root's namespace
    (``import pkg`` or ``from pkg import name`` of a name that is not a submodule)."""
    return {
        module: line
        for module, found in package_imports(root, package).items()
        if module != package
        for imported, _, line in found
        if imported == package
    }


def test_the_package_root_imports_nothing_above_the_front_door(tmp_path):
    assert upward_root_imports(ROOT, "keras_vit") == []
    # The check sees one.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[[tool.importlinter.contracts]]\ntype = "layers"\nlayers = ["commands", "factory", "models | (gone)"]\n'
    )
    for name in ("commands", "factory", "models"):
        (tmp_path / "pkg" / f"{name}.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.factory import x\nfrom pkg import models, commands\n")
    assert upward_root_imports(str(tmp_path), "pkg") == ["pkg.commands"]


def test_no_module_uses_the_package_roots_namespace(tmp_path):
    assert root_namespace_uses(ROOT, "keras_vit") == {}
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.sub import low\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "low.py").write_text("from pkg import sub\n\ndef f():\n    import pkg\n")
    assert root_namespace_uses(str(tmp_path), "pkg") == {"pkg.sub.low": 4}


IMPORT_SYSTEM = """
import sys
before = list(sys.meta_path), list(sys.path_hooks)
import keras
after_keras = list(sys.meta_path), list(sys.path_hooks)
import keras_vit
print(after_keras == (list(sys.meta_path), list(sys.path_hooks)), len(after_keras[0]) - len(before[0]))
"""


def test_importing_keras_vit_leaves_the_import_system_as_keras_left_it():
    # Keras itself adds a finder (absl's, and six's on TensorFlow); keras-vit adds none (the
    # keras-vit program holds the backends' lines back itself, without one).
    child = subprocess.run([sys.executable, "-c", IMPORT_SYSTEM], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split()[0] == "True", child.stdout


BACKENDS = ("keras", "tensorflow", "jax", "torch")
# A command line run in a fresh process, then the backends it imported (the last line).
RUN_AND_LIST = """
import sys
from keras_vit.commands import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted({{name.split(".")[0] for name in sys.modules}} & {backends!r})))
"""


def _imported_backends(argv):
    code = RUN_AND_LIST.format(backends=set(BACKENDS))
    child = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    return child.stdout.splitlines()[-1].split() if child.stdout.strip() else []


def _commands():
    from keras_vit.commands import COMMANDS

    return COMMANDS


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["presets"], ["presets", "--timm", "*dinov2*"]] + [[name, "--help"] for name in _commands()],
    ids=" ".join,
)
@once_on("torch", "what a command line imports does not depend on KERAS_BACKEND (none, or keras and its backend)")
def test_the_help_and_the_presets_table_import_no_backend(argv):
    # What a user types first answers at once: no Keras, no framework until a command runs.
    assert _imported_backends(argv) == [], f"keras-vit {' '.join(argv)} imported a backend"


LAZY = """
import sys, keras_vit
before = sorted({name.split(".")[0] for name in sys.modules} & {"keras", "tensorflow", "jax", "torch"})
listed = set(keras_vit.__all__) <= set(dir(keras_vit))
from keras_vit import create_model
print(before, listed, create_model is keras_vit.create_model, keras_vit.layers.LayerNorm.__name__,
      "keras" in sys.modules)
"""


def test_importing_keras_vit_imports_no_backend_until_a_name_is_used():
    child = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["[]", "True", "True", "LayerNorm", "True"], child.stdout
    import keras_vit

    with pytest.raises(AttributeError, match="module 'keras_vit' has no attribute 'no_such_name'"):
        keras_vit.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "package",
    [
        "keras_vit",
        "keras_vit.checkpoints",
        "keras_vit.evaluation",
        "keras_vit.export",
        "keras_vit.models",
        "keras_vit.training",
    ],
)
def test_a_lazy_package_gives_python_the_names_its_readers_see(package):
    # Its TYPE_CHECKING imports (what the API reference and type checkers read) are the names
    # its __getattr__ gives, each the object its module defines (a submodule of the same name,
    # once imported, would shadow a function that __getattr__ never gets to give).
    import ast
    import importlib

    module = importlib.import_module(package)
    with open(module.__file__) as f:
        tree = ast.parse(f.read())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    read = {alias.name: node.module for node in guarded.body for alias in node.names}
    for name, defined_in in read.items():
        assert getattr(importlib.import_module(defined_in), name) is getattr(module, name), name
    exported = set(module.__all__) - {"__version__"}  # the top level's version, beside its names
    assert set(read) == exported, set(read) ^ exported

"""The README is a page, the docs site builds in strict mode, and every link between them resolves."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from helpers import doc_pages, documented_commands

import keras_vit

pytestmark = pytest.mark.backend_free  # Python alone: runs once (tests/backend_free.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _outside_code(text):
    """The page without its fenced code blocks and inline code (links there are examples)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


def test_the_readme_is_a_page():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    assert len(lines) <= 300, len(lines)


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: os.path.relpath(p, ROOT))
def test_every_relative_link_resolves(page):
    with open(page) as f:
        text = _outside_code(f.read())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page
        path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#")[0]))
        if not os.path.exists(path):
            broken.append(target)
    assert not broken, f"{os.path.relpath(page, ROOT)} links to missing files: {broken}"


def test_the_api_reference_covers_every_public_name():
    with open(os.path.join(DOCS, "reference.md")) as f:
        documented = set(re.findall(r"^::: keras_vit\.(\w+)$", f.read(), flags=re.M))
    public = set(keras_vit.__all__) - {"__version__"}
    assert all(hasattr(keras_vit, name) for name in public)
    assert public <= documented, f"missing from docs/reference.md: {sorted(public - documented)}"


def _names_the_user_pages_use():
    """``{name: page}`` of every ``keras_vit.x.y`` the README, the quickstart, the tutorials and
    the guides name or import, but the error classes (the errors page lists them, checked
    below) and the generated pages'."""
    generated = ("cli-reference.md", "presets-reference.md", "recipes-reference.md", "errors.md")
    pages = [p for p in doc_pages() if os.sep + "guide" + os.sep in p or os.sep + "tutorials" + os.sep in p]
    pages += [os.path.join(ROOT, "README.md"), os.path.join(DOCS, "quickstart.md")]
    used = {}
    for page in pages:
        if page.endswith(generated):
            continue
        with open(page) as f:
            text = f.read()
        names = re.findall(r"\bkeras_vit(?:\.\w+)+", text)
        for module, imported in re.findall(r"from (keras_vit(?:\.\w+)*) import ([\w, ]+)", text):
            names += [f"{module}.{name.strip()}" for name in imported.split(",") if name.strip()]
        for name in names:
            if not name.endswith("Error"):
                used.setdefault(name, os.path.relpath(page, ROOT))
    return used


def test_the_api_reference_covers_every_name_the_user_pages_use():
    with open(os.path.join(DOCS, "reference.md")) as f:
        documented = set(re.findall(r"^::: (keras_vit[\w.]*)$", f.read(), flags=re.M))
    used = _names_the_user_pages_use()
    assert {"keras_vit.training.make_config", "keras_vit.images.resize_for_model"} <= set(used), used

    def covered(name):  # itself, a module above it, or a module with a documented member
        parts = name.split(".")
        above = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        return bool(above & documented) or any(d.startswith(name + ".") for d in documented)

    missing = {name: page for name, page in used.items() if not covered(name)}
    assert not missing, f"named on the user pages, missing from docs/reference.md: {missing}"


def test_every_docs_page_is_in_the_sites_navigation():
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        navigation = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", f.read(), flags=re.M))
    pages = {os.path.relpath(p, DOCS) for p in doc_pages() if p.startswith(DOCS + os.sep)}
    # A benchmark folder's notes are shown inside the generated performance page.
    pages = {p for p in pages if not p.startswith("benchmarks" + os.sep)}
    assert pages == navigation, (sorted(pages - navigation), sorted(navigation - pages))


def test_every_page_in_the_sites_navigation_is_linked_from_the_manuals_index():
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        navigation = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", f.read(), flags=re.M))
    with open(os.path.join(DOCS, "index.md")) as f:
        linked = set(re.findall(r"\]\(([\w/.-]+\.md)(?:#[\w-]*)?\)", f.read()))
    assert navigation - {"index.md"} <= linked, sorted(navigation - {"index.md"} - linked)


SNIPPET = re.compile(r'^--8<-- "([^":]+):(\w+)"$', flags=re.M)


def test_what_the_manual_shows_from_the_readme_is_a_marked_readme_section():
    # The set-up commands and the command line at a glance are written once, in the README,
    # and the site's pages show them from there (pymdownx.snippets): each page's
    # include names a section the README marks, holding text with no relative link (a link
    # relative to the README breaks on a page in docs/guide).
    included = {}
    for page in doc_pages():
        with open(page) as f:
            for source, section in SNIPPET.findall(f.read()):
                included.setdefault((source, section), []).append(os.path.relpath(page, ROOT))
    assert {("README.md", "setup"), ("README.md", "commands")} <= set(included), included
    for (source, section), pages in included.items():
        with open(os.path.join(ROOT, source)) as f:
            text = f.read()
        marks = re.search(rf"--8<-- \[start:{section}\] -->\n(.*?)\n<!-- --8<-- \[end:{section}\]", text, flags=re.S)
        assert marks, f"{pages} include {source}:{section}, which {source} does not mark"
        assert not LINK.findall(_outside_code(marks.group(1))), f"{source}:{section} holds a relative link"


@pytest.mark.slow
def test_the_docs_site_builds_in_strict_mode(tmp_path):
    mkdocs = shutil.which("mkdocs", path=os.path.dirname(sys.executable))
    assert mkdocs, "mkdocs is a test dependency (pip install -e '.[test]')"
    built = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists()
    with open(tmp_path / "site" / "reference" / "index.html") as f:
        reference = f.read()
    for name in set(keras_vit.__all__) - {"__version__"}:
        assert f'id="keras_vit.{name}"' in reference, name
    # The README's sections the manual shows are on its pages (the snippets were included).
    with open(tmp_path / "site" / "guide" / "install" / "index.html") as f:
        install = f.read()
    assert "scripts/test.sh" in install and "--8&lt;" not in install


def _parses(argv):
    """Parses a command line as its command would, doing none of its work: every flag, choice
    and value type checked (the recipes' values against their ranges too)."""
    from keras_vit.commands import COMMANDS, command
    from keras_vit.commands.recipe_flags import parse_args

    name, rest = argv[0], argv[1:]
    assert name in COMMANDS, f"not a command: {name}"
    if name in ("pretrain", "finetune", "main"):
        return parse_args(rest, "digits_finetune" if name == "finetune" else "digits_pretrain")
    args = command(name).build_parser().parse_args(rest)
    if name == "launch" and not args.command.endswith(".py"):
        _parses([args.command, *args.arguments])
    return args


def test_every_command_the_readme_and_the_manual_show_is_taken_as_written():
    commands = documented_commands()
    assert len(commands) >= 30, commands  # the extraction found the pages' commands
    readme = {tuple(argv[:1]) for page, _, argv in commands if page == "README.md"}
    assert {("--help",), ("classify",), ("pretrain",), ("finetune",), ("export",), ("presets",)} <= readme
    for page, _, argv in commands:
        if argv in (["--help"], ["presets"]):
            continue  # run below
        try:
            _parses(argv)
        except (SystemExit, ValueError) as error:
            raise AssertionError(f"{page}: keras-vit {' '.join(argv)}: {error}") from None


def test_the_readmes_listing_commands_run(capsys):
    from keras_vit.commands import COMMANDS, main

    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert all(f"  {name} " in listing for name in COMMANDS), listing
    assert main(["presets"]) == 0
    listing = capsys.readouterr().out
    assert "vit_b16.augreg2_in21k_ft_in1k" in listing and "hf-hub:timm/<architecture>.<tag>" in listing


def test_every_test_file_is_in_the_contributing_pages_index():
    with open(os.path.join(DOCS, "contributing.md")) as f:
        page = f.read()
    files = sorted(n for n in os.listdir(os.path.join(ROOT, "tests")) if n.startswith("test_") and n.endswith(".py"))
    assert files and [n for n in files if f"`{n}`" not in page] == []


ERROR_ROW = re.compile(r"^\| `(keras_vit\.[\w.]+)` \| ([^|]+) \|", flags=re.M)
# Raised inside the download and caught there: a user meets the DownloadError it becomes.
INTERNAL_ERRORS = {"FetchError"}


def test_the_error_classes_table_states_each_errors_real_bases():
    import builtins
    import importlib

    with open(os.path.join(DOCS, "guide", "errors.md")) as f:
        rows = ERROR_ROW.findall(f.read())
    stated = {}
    for path, bases in rows:
        module, _, name = path.rpartition(".")
        error = getattr(importlib.import_module(module), name)
        # Every class it is, its own and the built-in ones, up to (not with) Exception.
        real = [c.__name__ for c in error.__mro__[1:] if c not in (Exception, BaseException, object)]
        assert re.findall(r"`(\w+)`", bases) == real, f"errors.md says {name} is a {bases.strip()}; it is {real}"
        assert all(hasattr(builtins, c) or c in stated for c in real), (name, real)
        stated[name] = path
    defined = set()
    for folder, _, names in os.walk(os.path.join(ROOT, "keras_vit")):
        for n in names:
            if n.endswith(".py"):
                with open(os.path.join(folder, n)) as f:
                    defined.update(re.findall(r"^class (\w+Error)\(", f.read(), flags=re.M))
    missing = defined - set(stated) - INTERNAL_ERRORS
    assert not missing, f"error classes missing from errors.md's table: {sorted(missing)}"


def test_the_command_line_reference_is_what_the_parsers_print():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_cli_reference", os.path.join(ROOT, "scripts", "make_cli_reference.py")
    )
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    with open(generator.PAGE) as f:
        written = f.read()
    assert written == generator.page(), "docs/guide/cli-reference.md is stale: python scripts/make_cli_reference.py"


def test_the_presets_and_recipes_references_are_what_the_catalogue_and_the_recipes_hold():
    import importlib.util

    from keras_vit.presets import catalog
    from keras_vit.training import recipe_presets

    spec = importlib.util.spec_from_file_location(
        "make_catalogue_reference", os.path.join(ROOT, "scripts", "make_catalogue_reference.py")
    )
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    for path, page in (
        (generator.PRESETS_PAGE, generator.presets_page),
        (generator.RECIPES_PAGE, generator.recipes_page),
    ):
        with open(path) as f:
            written = f.read()
        stale = f"{os.path.relpath(path, ROOT)} is stale: python scripts/make_catalogue_reference.py"
        assert written == page(), stale
    with open(generator.PRESETS_PAGE) as f:
        presets = f.read()
    assert all(f"| `{name}` |" in presets for name in catalog.PRESETS)
    with open(generator.RECIPES_PAGE) as f:
        recipes = f.read()
    assert all(f"`{name}`" in recipes for name in recipe_presets.PRESETS)

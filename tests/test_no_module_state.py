"""No hidden module-level mutable state in graphc: every module-level binding of a mutable
container, and every name a function rebinds with ``global``, is a constant table or says why
it may live there.

The rule (scanned with ast over every module of graphc/):
- A module-level binding (also under a module-level ``if``/``try``/``with``) of a list, dict
  or set display or comprehension, or of a call to a container type (``dict()``, ``list()``,
  ``set()``, ``defaultdict``, ``OrderedDict``, ``deque``, ``Counter``, ``WeakKeyDictionary``,
  ``WeakValueDictionary``, ``WeakSet``), and every name assigned under a ``global``
  statement, is state unless:
  - it is a dunder (``__all__``, ``__path__``), or
  - it is a constant table: an ALL_CAPS name (``_`` prefix allowed) bound to a display or
    comprehension that no function changes (no item assignment or deletion, augmented
    assignment, or mutating method call such as ``append``/``update``/``setdefault``, in its
    module, through ``module.NAME``, or after ``from module import NAME``); statements at
    module level may still complete it (they run once, at import), or
  - the comment lines just above it (or at the end of its line) start with a marker saying
    what it is: ``# cache:`` (derived values, recomputable), ``# registry:`` (filled once at
    import by decorators, read-only after), ``# side table:`` (facts about other objects,
    weakly keyed by them), ``# process:`` (one per OS process by nature: JAX's own
    process-wide settings, a process's role in a job, Paddle's documented process defaults),
    each followed by the reason, or
The parameter-server and collective slots issue 23 names (``_CHANNEL``, ``_SERVER``,
``_COLLECTIVE_WAIT``, ``_FEED_PROVIDERS``, ``_TRAINER``) and the startup switch
(``_ENABLED``) must not come back in any form: runtime/host_services.py holds them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "graphc"

CONTAINER_CALLS = frozenset({
    "dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter",
    "WeakKeyDictionary", "WeakValueDictionary", "WeakSet"})
MUTATORS = frozenset({
    "append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "clear",
    "remove", "discard", "__setitem__", "__delitem__", "sort", "reverse"})
MARKERS = ("cache:", "registry:", "side table:", "process:")
CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*\Z")


# What issue 23 removed: no module may bind these again.
REMOVED = ("_CHANNEL", "_SERVER", "_COLLECTIVE_WAIT", "_FEED_PROVIDERS", "_TRAINER", "_ENABLED")


def _is_container(node: ast.AST) -> bool:
    if isinstance(node, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp
                  | ast.SetComp):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
            else None
        return name in CONTAINER_CALLS
    return False


def _module_level(body):
    """Statements at module level, descending into if/try/with blocks (not defs/classes)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With | ast.For | ast.While):
            yield from _module_level(node.body + getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body + node.orelse + node.finalbody
                                     + [s for h in node.handlers for s in h.body])


def _targets(node) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _name(node) -> str | None:
    """``x`` for ``x`` and ``m.x`` (a name, or a module's attribute)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(
        node, ast.Attribute) else None


def _in_functions(tree: ast.AST):
    """Nodes inside function bodies: code that may run after import. A table filled by
    module-level statements is complete once its module has been imported."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from ast.walk(node)


def _mutated(tree: ast.AST) -> set[str]:
    """Names the module's functions change in place (``x`` or ``module.x``): item
    stores/deletes, augmented assignment, mutating method calls."""
    out = set()
    for node in _in_functions(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            out.add(_name(node.value))
        elif isinstance(node, ast.AugAssign):
            out.add(_name(node.target))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS:
            out.add(_name(node.func.value))
    out.discard(None)
    return out


def _changed_elsewhere() -> set[str]:
    """Names some module changes through another module's attribute (``m.x[k] = v``) or
    after importing them (``from m import x``): a table that looks constant in its own
    module may be filled from outside."""
    out = set()
    for _, source in _modules():
        tree = ast.parse(source)
        imported = {a.asname or a.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) for a in node.names}
        attrs = set()
        for node in _in_functions(tree):
            target = node.value if isinstance(node, ast.Subscript) and isinstance(
                node.ctx, ast.Store | ast.Del) else node.target if isinstance(
                node, ast.AugAssign) else node.func.value if isinstance(
                node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in MUTATORS else None
            if isinstance(target, ast.Attribute):
                attrs.add(target.attr)
        out |= attrs | (_mutated(tree) & imported)
    return out


def _comments(source: str) -> dict[int, str]:
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _marked(lineno: int, comments: dict[int, str], lines: list[str]) -> bool:
    """A marker at the end of the line, or on the comment lines right above it."""
    texts = [comments.get(lineno, "")]
    k = lineno - 1
    while k >= 1 and lines[k - 1].lstrip().startswith("#"):
        texts.append(comments.get(k, ""))
        k -= 1
    return any(any(t.startswith(m) and len(t) > len(m) + 3 for m in MARKERS) for t in texts)


def scan(source: str, rel: str = "<source>", elsewhere: frozenset = frozenset()) -> list[str]:
    """The unexplained module-level state of one module, as ``rel:line name`` strings
    (``elsewhere``: names other modules change, see ``_changed_elsewhere``)."""
    tree = ast.parse(source)
    comments, lines = _comments(source), source.splitlines()
    mutated = _mutated(tree) | elsewhere
    found = []
    for node in _module_level(tree.body):
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        if not _is_container(node.value):
            continue
        for name in _targets(node):
            if name.startswith("__") and name.endswith("__"):
                continue
            literal = not isinstance(node.value, ast.Call)
            if literal and CONSTANT.match(name) and name not in mutated:
                continue  # a constant table
            if _marked(node.lineno, comments, lines):
                continue
            found.append(f"{rel}:{node.lineno} {name}")
    rebinds = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    for node in _module_level(tree.body):  # the module-level binding a ``global`` rebinds
        if isinstance(node, ast.Assign | ast.AnnAssign):
            for name in _targets(node):
                if name in rebinds and not _marked(node.lineno, comments, lines):
                    found.append(f"{rel}:{node.lineno} {name} (rebound with global)")
    return found


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_graphc_has_no_unexplained_module_state():
    elsewhere = frozenset(_changed_elsewhere())
    found = [hit for rel, source in _modules() for hit in scan(source, rel, elsewhere)]
    assert not found, ("module-level mutable state without a reason (see this test's "
                       "docstring: a constant table, or a '# cache:' / '# registry:' / "
                       "'# side table:' / '# process:' comment): " + ", ".join(found))


def test_the_hidden_slots_of_issue_23_are_gone():
    bound = []
    for rel, source in _modules():
        tree = ast.parse(source)
        for node in _module_level(tree.body):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                bound += [f"{rel}: {n}" for n in _targets(node) if n in REMOVED]
            elif isinstance(node, ast.FunctionDef) and node.name in (
                    "install_channel", "install_server", "set_collective_wait",
                    "add_feed_provider"):
                bound.append(f"{rel}: def {node.name}")
    assert not bound, bound


_FILL = "def f(k):\n    _FLAT[k] = 1\n"


@pytest.mark.parametrize("source, flagged", [
    ("_SLOT = [None]\n", []),  # never changed: a constant, however odd
    ("_SLOT = [None]\ndef f(x):\n    _SLOT[0] = x\n", ["_SLOT"]),
    ("_TABLE = {'a': 1}\n", []),  # a constant table
    ("_TABLE = {'a': 1}\ndef f():\n    _TABLE.update(b=2)\n", ["_TABLE"]),
    ("_hooks = []\n", ["_hooks"]),  # lower case: not a constant
    ("_SEEN = set()\n", ["_SEEN"]),  # a call: built to be filled
    ("from weakref import WeakKeyDictionary\n_BY = WeakKeyDictionary()\n", ["_BY"]),
    ("# cache: compiled draws by key\n_FLAT = {}\n" + _FILL, []),
    ("# a comment without a marker\n_FLAT = {}\n" + _FILL, ["_FLAT"]),
    ("_FLAT = {}  # cache:\n" + _FILL, ["_FLAT"]),  # a marker without its reason
    ("_FLAT = {}  # cache: by key\n" + _FILL, []),
    ("if True:\n    _x = {}\n", ["_x"]),
    ("__all__ = ['f']\n", []),
    ("_x = None\ndef f():\n    global _x\n    _x = 1\n", ["_x"]),
    ("# process: the one default\n_x = None\ndef f():\n    global _x\n    _x = 1\n", []),
])
def test_the_rule(source, flagged):
    assert [hit.split()[1] for hit in scan(source)] == flagged

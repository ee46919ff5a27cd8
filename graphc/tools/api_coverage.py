"""How much of Paddle Fluid's public API graphc.fluid offers: each entry of the reference list
(``paddle-fluid-api.txt``) is present with Paddle's arguments, present with others, refused
with advice, or absent. ``python -m graphc.tools.api_coverage [--list STATUS] [--module M]``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

# the reference list lives in the shared folder beside the checkout
DEFAULT_LIST = Path(__file__).resolve().parents[3] / "shared" / "reference" / "paddle-fluid-api.txt"
STATUSES = ("same", "different", "refused", "absent")
# not static-graph Fluid: left out of every count, as the issues measuring coverage do
EXCLUDED = ("paddle.fluid.dygraph", "paddle.fluid.contrib")

# Entries whose list line records Paddle 1.6's arguments where Paddle 1.8 changed them in a
# way one signature cannot serve (1.8 put ``parameter_list`` second after the hyper-
# parameters, so a 1.6 positional ``regularization`` lands in it). graphc follows 1.8; such an
# entry is 'same' only when graphc's arguments are exactly 1.8's, in order
# (docs/porting_from_paddle.md lists them). entry: (1.8's arguments, why)
_OPT18 = ("parameter_list", "regularization", "grad_clip", "name")
PADDLE_18_SIGNATURES: dict[str, tuple[tuple[str, ...], str]] = {
    f"paddle.fluid.optimizer.{cls}.__init__": (head + _OPT18 + tail, "1.8 inserted "
                                               "parameter_list and grad_clip")
    for cls, head, tail in (
        ("SGD", ("learning_rate",), ()),
        ("SGDOptimizer", ("learning_rate",), ()),
        ("Momentum", ("learning_rate", "momentum"), ()),
        ("MomentumOptimizer", ("learning_rate", "momentum"), ()),
        ("Adagrad", ("learning_rate", "epsilon"), ("initial_accumulator_value",)),
        ("AdagradOptimizer", ("learning_rate", "epsilon"), ("initial_accumulator_value",)),
        ("Adam", ("learning_rate", "beta1", "beta2", "epsilon"), ("lazy_mode",)),
        ("AdamOptimizer", ("learning_rate", "beta1", "beta2", "epsilon"), ("lazy_mode",)),
        ("Adamax", ("learning_rate", "beta1", "beta2", "epsilon"), ()),
        ("AdamaxOptimizer", ("learning_rate", "beta1", "beta2", "epsilon"), ()),
        ("DecayedAdagrad", ("learning_rate", "decay", "epsilon"), ()),
        ("DecayedAdagradOptimizer", ("learning_rate", "decay", "epsilon"), ()),
        ("Ftrl", ("learning_rate", "l1", "l2", "lr_power"), ()),
        ("FtrlOptimizer", ("learning_rate", "l1", "l2", "lr_power"), ()),
        ("Adadelta", ("learning_rate", "epsilon", "rho"), ()),
        ("AdadeltaOptimizer", ("learning_rate", "epsilon", "rho"), ()),
        ("LarsMomentum", ("learning_rate", "momentum", "lars_coeff", "lars_weight_decay"), ()),
        ("LarsMomentumOptimizer", ("learning_rate", "momentum", "lars_coeff",
                                   "lars_weight_decay"), ()),
    )
}
# Momentum 1.8 keeps use_nesterov between parameter_list and regularization
for _cls in ("Momentum", "MomentumOptimizer"):
    PADDLE_18_SIGNATURES[f"paddle.fluid.optimizer.{_cls}.__init__"] = (
        ("learning_rate", "momentum", "parameter_list", "use_nesterov", "regularization",
         "grad_clip", "name"), "1.8 inserted parameter_list and grad_clip")
del _cls
PADDLE_18_SIGNATURES["paddle.fluid.param_attr.ParamAttr.__init__"] = (
    ("name", "initializer", "learning_rate", "regularizer", "trainable", "do_model_average"),
    "1.8 dropped gradient_clip, 1.6's sixth argument (graphc keeps it keyword-only)")
PADDLE_18_SIGNATURES["paddle.fluid.param_attr.WeightNormParamAttr.__init__"] = (
    ("dim", "name", "initializer", "learning_rate", "regularizer", "trainable",
     "do_model_average"),
    "1.8 dropped gradient_clip, 1.6's seventh argument (graphc keeps it keyword-only)")


@dataclass(frozen=True)
class Entry:
    """One line of the list: a dotted name and, for a callable, its argument names
    (None: a class line or a C++ entry without a Python signature)."""

    name: str
    args: tuple[str, ...] | None
    positional: int = 0  # how many of ``args`` come before ``*`` / ``*args``

    @property
    def module(self) -> str:
        """The module an entry belongs to: its name up to the first class or last part."""
        parts = self.name.split(".")
        for i, part in enumerate(parts[1:], 1):
            if part[:1].isupper() or i == len(parts) - 1:
                return ".".join(parts[:i])
        return self.name


@dataclass(frozen=True)
class Result:
    entry: Entry
    status: str
    detail: str = ""


def _split_args(text: str) -> list[str]:
    """Split an argument list at its top-level commas (defaults hold lists and strings)."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)\s*(?:\((?P<args>.*)\)|\[class.*\])?")


def parse_list(text: str) -> list[Entry]:
    """Entries in list order; a name listed again (its 1.8 signature) replaces the first."""
    entries: dict[str, Entry] = {}
    for line in text.splitlines():
        line = line.split("  #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        args_text = m.group("args")
        if args_text is None or args_text == "...":
            entries[m.group("name")] = Entry(m.group("name"), None)
            continue
        names, positional, star = [], 0, False
        for arg in _split_args(args_text):
            bare = arg.split("=", 1)[0].strip()
            if bare.startswith("*"):
                star = True
                continue
            names.append(bare)
            positional += not star
        entries[m.group("name")] = Entry(m.group("name"), tuple(names), positional)
    return list(entries.values())


def _resolve(dotted: str):
    """The object graphc offers for a ``graphc.*`` dotted name, walking from the package:
    an attribute, else a submodule; raises what the import system or the module raises."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for part in parts[1:]:
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError as exc:
            if not inspect.ismodule(obj):
                raise
            missing = exc
        try:  # a submodule not imported yet (graphc.fluid.layers.nn)
            obj = importlib.import_module(f"{obj.__name__}.{part}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{obj.__name__}.{part}":
                raise missing from None  # neither attribute nor module: the module's word
            raise
    return obj


def _parameters(obj, drop_self: bool):
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return None  # a builtin or C-level callable: nothing to compare
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return params


def compare_exact(args: tuple[str, ...], obj) -> str:
    """'' when ``obj``'s positional arguments (after self) are exactly ``args``, in order, and
    anything else it takes is keyword-only with a default; else why not."""
    params = _parameters(obj, drop_self=True)
    if params is None:
        return ""
    kinds = inspect.Parameter
    ours = [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY,
                                                 kinds.POSITIONAL_OR_KEYWORD)]
    if ours != list(args):
        return f"arguments {ours} != Paddle 1.8's {list(args)}"
    required = [p.name for p in params if p.kind == kinds.KEYWORD_ONLY
                and p.default is kinds.empty]
    if required:
        return f"requires {required}, which Paddle 1.8's does not"
    return ""


def compare(entry: Entry, obj) -> str:
    """'' when ``obj`` takes Paddle's arguments (names, positional order), else why not; an
    entry of PADDLE_18_SIGNATURES is held to 1.8's arguments exactly."""
    if entry.name in PADDLE_18_SIGNATURES:
        return compare_exact(PADDLE_18_SIGNATURES[entry.name][0], obj)
    if entry.args is None:
        return ""
    paddle = [a for a in entry.args if a not in ("self", "cls")]
    positional = entry.positional - (len(entry.args) - len(paddle))
    params = _parameters(obj, drop_self=True)
    if params is None:
        return ""
    kinds = inspect.Parameter
    ours_pos = [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY,
                                                     kinds.POSITIONAL_OR_KEYWORD)]
    has_var_kw = any(p.kind == kinds.VAR_KEYWORD for p in params)
    has_var_pos = any(p.kind == kinds.VAR_POSITIONAL for p in params)
    by_name = {p.name for p in params}
    if ours_pos[:positional] != paddle[:positional] and not (
            has_var_pos and not ours_pos):
        return f"positional {ours_pos[:positional]} != Paddle's {paddle[:positional]}"
    unknown = [a for a in paddle if a not in by_name]
    if unknown and not has_var_kw:
        return f"does not take {unknown}"
    required = [p.name for p in params if p.default is kinds.empty
                and p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
                and p.name not in paddle]
    if required:
        return f"requires {required}, which Paddle's does not"
    return ""


def classify(entry: Entry) -> Result:
    from ..fluid._missing import MissingAPIError, MissingModuleError
    target = "graphc" + entry.name[len("paddle"):]
    try:
        obj = _resolve(target)
    except (MissingAPIError, MissingModuleError) as exc:
        status = "refused" if "on purpose" in str(exc) else "absent"
        return Result(entry, status, str(exc).split("\n")[0][:160])
    except (AttributeError, ImportError) as exc:
        return Result(entry, "absent", f"{type(exc).__name__}: {exc}"[:160])
    why = compare(entry, obj)
    return Result(entry, "different" if why else "same", why)


def measure(path: Path | str = DEFAULT_LIST, include_excluded: bool = False) -> list[Result]:
    entries = parse_list(Path(path).read_text())
    if not include_excluded:
        entries = [e for e in entries if not e.name.startswith(EXCLUDED)]
    return [classify(e) for e in entries]


def counts_by_module(results: list[Result]) -> dict[str, Counter]:
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        table[r.entry.module][r.status] += 1
    return dict(sorted(table.items()))


def format_table(results: list[Result]) -> str:
    rows = [f"{'module':48} " + " ".join(f"{s:>9}" for s in STATUSES)]
    total: Counter = Counter()
    for module, c in counts_by_module(results).items():
        total.update(c)
        rows.append(f"{module:48} " + " ".join(f"{c[s]:9d}" for s in STATUSES))
    rows.append(f"{'total':48} " + " ".join(f"{total[s]:9d}" for s in STATUSES))
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphc.tools.api_coverage",
                                     description=__doc__)
    parser.add_argument("--api-list", default=str(DEFAULT_LIST))
    parser.add_argument("--list", choices=STATUSES, help="print the entries with this status")
    parser.add_argument("--module", default="", help="only entries under this dotted prefix")
    args = parser.parse_args(argv)
    results = [r for r in measure(args.api_list) if r.entry.name.startswith(args.module)]
    if args.list:
        for r in results:
            if r.status == args.list:
                print(f"{r.entry.name}  {r.detail}")
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Paddle APIs graphc lacks on purpose: one table of names -> what to use instead, and the
error raised (never a bare AttributeError/ImportError) when a ported script reaches one."""

from __future__ import annotations

import dis
import importlib.abc
import importlib.machinery
import importlib.util
import sys

from ..ir.errors import GraphcError

_DYGRAPH = ("graphc runs static programs only (no dygraph / imperative mode): build the model "
            "inside fluid.program_guard(main, startup) and run it with fluid.Executor")
_LOD = ("this LoD (ragged sequence) API is not implemented yet; LoD values, the sequence_* "
        "layers, dynamic_lstm/gru, CRF and DynamicRNN are (docs/lod.md)")
_AMP = ("graphc has no contrib.mixed_precision; ask for mixed precision with "
        "DistributedStrategy.amp = True (fleet) or BuildStrategy's AMP pass (see "
        "docs/strategies.md)")

# dotted name under graphc.fluid -> advice. A name also matches every name below it
# (``dygraph`` covers ``dygraph.guard``), the longest entry winning.
ADVICE: dict[str, str] = {
    "dygraph": _DYGRAPH,
    "dygraph_grad_clip": _DYGRAPH,
    "imperative": _DYGRAPH,
    "enable_dygraph": _DYGRAPH,
    "disable_dygraph": "graphc is always in static mode; this call is not needed",
    "enable_imperative": _DYGRAPH,
    "save_dygraph": _DYGRAPH + "; save with fluid.save(program, path)",
    "load_dygraph": _DYGRAPH + "; load with fluid.load(program, path)",
    "Linear": _DYGRAPH + "; use fluid.layers.fc",
    "Conv2D": _DYGRAPH + "; use fluid.layers.conv2d",
    "contrib": ("graphc's fluid.contrib holds only contrib.layers' basic_lstm, basic_gru, "
                "BasicLSTMUnit, BasicGRUUnit, shuffle_batch, tdm_child, tdm_sampler and "
                "index_sample (Paddle's other experimental ops are not provided); see "
                "docs/porting_from_paddle.md for what ports"),
    "contrib.mixed_precision": _AMP,
    "contrib.mixed_precision.decorate": _AMP,
    "contrib.slim": "graphc has no model compression toolkit (contrib.slim)",
    # Paddle 1.8's ComplexVariable (framework.py) is documented as dygraph-only: one with data
    # comes from dygraph.to_variable(<complex ndarray>), and numpy() reads the two VarBases
    "ComplexVariable": (
        "Paddle 1.8's ComplexVariable is a dygraph (imperative) type: its documentation "
        "supports dygraph mode only, values come from fluid.dygraph.to_variable(<complex "
        "ndarray>) and numpy() reads its real and imag dygraph variables; " + _DYGRAPH),
    "load_op_library": "graphc cannot load compiled custom operators; register a Python op",
    # ``import graphc as paddle``: Paddle 2.x's dynamic-graph top level
    "paddle.nn": _DYGRAPH + "; use paddle.fluid.layers",
    "paddle.to_tensor": _DYGRAPH,
    "paddle.Model": _DYGRAPH,
    "paddle.jit": _DYGRAPH,
    "paddle.vision": "graphc has no paddle.vision; use paddle.fluid.layers and nets",
    "paddle.static": ("graphc's static API is paddle.fluid (import graphc.fluid as fluid); "
                      "paddle.static.data is fluid.data"),
}

# Modules whose import is refused (relative to graphc.fluid): ``import paddle.fluid.dygraph``
# and ``from paddle.fluid.contrib.mixed_precision import decorate`` meet the advice at once.
_MISSING_MODULES = ("dygraph", "dygraph_grad_clip", "imperative")

# Paddle's download datasets (``paddle.dataset.*``): graphc.dataset is the Dataset API
_DOWNLOAD_DATASETS = {
    "mnist": "mnist/train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
             "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz",
    "uci_housing": "uci_housing/housing.data",
    "cifar": "cifar/cifar-10-python.tar.gz (cifar-100-python.tar.gz)",
    "imdb": "imdb/aclImdb_v1.tar.gz",
    "imikolov": "imikolov/simple-examples.tgz",
    "movielens": "movielens/ml-1m.zip",
    "conll05": "conll05st/conll05st-tests.tar.gz and its dictionaries",
    "wmt14": "wmt14/wmt14.tgz",
    "wmt16": "wmt16/wmt16.tar.gz",
    "flowers": "flowers/102flowers.tgz, imagelabels.mat, setid.mat",
    "voc2012": "voc2012/VOCtrainval_11-May-2012.tar",
    "sentiment": "sentiment (nltk movie_reviews)",
    "mq2007": "MQ2007/MQ2007.rar",
    "common": "(download helpers)",
}


class MissingAPIError(GraphcError, AttributeError):
    """A Paddle API that graphc lacks on purpose; the message says what to use instead.
    An AttributeError too, so ``hasattr(fluid, name)`` is False rather than an exception."""


class MissingModuleError(GraphcError, ImportError):
    """Importing a Paddle module that graphc lacks on purpose (``paddle.fluid.dygraph.nn``),
    or a name graphc lacks with ``from <module> import <name>``."""


def advice_for(dotted: str) -> str | None:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        found = ADVICE.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


def missing(module: str, name: str) -> AttributeError:
    """The error for ``module.name`` (module under graphc): advice if the table knows the
    name, else a plain statement that graphc's Paddle surface has no such name."""
    if name.startswith("__"):  # Python's own protocol probes: stay a plain AttributeError
        return AttributeError(f"module '{module}' has no attribute '{name}'")
    if module == "graphc.fluid" or module.startswith("graphc.fluid."):
        rel = module.removeprefix("graphc.fluid").lstrip(".")
    elif module == "graphc":
        rel = "paddle"  # ``import graphc as paddle``: Paddle 2.x top-level names
    else:
        rel = module.removeprefix("graphc.")
    advice = advice_for(f"{rel}.{name}" if rel else name)
    if advice is None and rel and not rel.startswith("layers"):
        advice = ADVICE.get(name)  # fluid.param_attr.WeightNormParamAttr as fluid.Weight...
    if advice is None and module == "graphc.dataset" and name in _DOWNLOAD_DATASETS:
        advice = download_dataset_advice(name)
    # ``from module import name``: Python turns an AttributeError into a bare ImportError,
    # dropping the advice, so that statement gets the advice as an ImportError
    cls = MissingModuleError if _importing_from() else MissingAPIError
    if advice is not None:
        return cls(f"{module}.{name}: graphc lacks this on purpose. {advice}")
    return cls(
        f"module '{module}' has no attribute '{name}': graphc does not provide it (see "
        "docs/porting_from_paddle.md for the Paddle 1.8 APIs that port)")


# -- issue 25: framework surface
# The functions a module attribute lookup passes through on its way to ``missing``.
_LOOKUP_FRAMES = ("missing", "__getattr__", "<lambda>", "_raise")
_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def _importing_from() -> bool:
    """Whether the attribute lookup that ends in ``missing`` comes from a ``from m import
    name`` statement (the first frame outside the lookup is executing IMPORT_FROM)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name in _LOOKUP_FRAMES and \
            frame.f_globals.get("__name__", "").startswith("graphc"):
        frame = frame.f_back
    if frame is None:
        return False
    code, at = frame.f_code.co_code, frame.f_lasti
    return 0 <= at < len(code) and code[at] == _IMPORT_FROM


# Real Paddle 1.8 module paths (under graphc.fluid) that scripts import at module level and
# graphc has no module for: importing one loads a module, so a script that only imports it
# runs. Its names resolve in the graphc module given (None: none), else raise the advice.
_PADDLE_MODULES: dict[str, str | None] = {
    **{f"dygraph.{m}": None for m in (
        "base", "parallel", "nn", "layers", "learning_rate_scheduler", "checkpoint", "jit",
        "container", "tracer", "backward_strategy", "rnn", "io", "static_runner", "profiler",
        "varbase_patch_methods", "math_op_patch", "layer_object_helper", "amp",
        "dygraph_to_static", "parallel_helper")},
    **{f"contrib.{m}": None for m in (
        "utils", "reader", "decoder", "extend_optimizer", "model_stat",
        "op_frequence", "memory_usage_calc", "optimizer", "quantize", "int8_inference")},
    # (contrib.mixed_precision and contrib.slim stay refused at import: importing them is
    # using them, and their advice names graphc's replacement)
    **{f"layers.{m}": "graphc.layers" for m in (
        "control_flow", "sequence_lod", "rnn", "collective", "layer_function_generator",
        "math_op_patch")},
}


class _ViewLoader(importlib.abc.Loader):
    """A Paddle module graphc has no file for, as a view of the graphc module holding its
    names (``fluid.layers.control_flow``: graphc.layers); a name graphc lacks raises the
    advice of ``fluid.<parent>.<name>`` (``layers.While``)."""

    def __init__(self, base: str):
        self.base = base

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        base, parent = self.base, module.__name__.rsplit(".", 1)[0]

        def __getattr__(name: str):
            real = importlib.import_module(base)
            if not name.startswith("__") and name in getattr(real, "__all__", ()):
                return getattr(real, name)
            raise missing(parent, name)

        module.__getattr__ = __getattr__
        module.__doc__ = f"Paddle's {module.__name__}: its names as {base} has them"


def paddle_module_spec(fullname: str, rel: str):
    """The spec of a Paddle module path graphc lacks but lets scripts import, or None."""
    if rel not in _PADDLE_MODULES:
        return None
    base = _PADDLE_MODULES[rel]
    if base is None:
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
    return importlib.machinery.ModuleSpec(fullname, _ViewLoader(base))
# -- end issue 25: framework surface


def download_dataset_advice(name: str) -> str:
    return (f"paddle.dataset.{name} downloads data, which graphc never does at run time "
            f"(it reads Paddle's cached files for {', '.join(_READABLE_DATASETS[1:-1])} only); "
            f"graphc.dataset is Paddle's Dataset API (fluid.dataset: InMemoryDataset, "
            f"QueueDataset). Feed your own arrays, e.g. read Paddle's cached files "
            f"(~/.cache/paddle/dataset/{_DOWNLOAD_DATASETS[name]}) with NumPy and wrap them "
            "in a reader for graphc.batch")


# -- issue 25: datasets
# the download datasets graphc reads from Paddle's cache (graphc/dataio/paddle_datasets/),
# ``graphc.dataset.<name>`` being that module under a second name
_READABLE_DATASETS = ("common", "mnist", "cifar", "uci_housing", "imdb", "imikolov",
                      "movielens", "conll05", "wmt14", "wmt16", "flowers", "sentiment",
                      "image")  # port24: image is Paddle's reader helpers, no download


def download_dataset(name: str):
    """``graphc.dataset.<name>`` for a Paddle download dataset: graphc's module reading
    Paddle's cached files, else MissingAPIError with the advice."""
    if name in _READABLE_DATASETS:
        return importlib.import_module(f"graphc.dataio.paddle_datasets.{name}")
    raise missing("graphc.dataset", name)
# -- end issue 25: datasets


class _StubLoader(importlib.abc.Loader):
    """An empty package for a Paddle module graphc lacks (``graphc.fluid.dygraph``): importing
    it works, so scripts that only import it load; any attribute or submodule of it raises
    the advice."""

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        module.__path__ = []
        module.__doc__ = f"graphc lacks {module.__name__} on purpose: {_advice_of(module.__name__)}"
        module.__getattr__ = lambda name: _raise(missing(module.__name__, name))


def _raise(exc):
    raise exc


def _advice_of(fullname: str) -> str:
    return advice_for(fullname.removeprefix("graphc.fluid.")) or ""


class _AliasLoader(importlib.abc.Loader):
    """``import graphc.fluid.layers.nn``: the already-importable ``graphc.layers.nn``."""

    def __init__(self, real: str):
        self.real = real

    def create_module(self, spec):
        return importlib.import_module(self.real)

    def exec_module(self, module) -> None:
        pass  # the real module ran when it was imported under its own name


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent that is a module, not a package
        return False


def _no_module(fullname: str, rel: str) -> MissingModuleError:
    advice = advice_for(rel)
    if advice is not None:
        return MissingModuleError(f"{fullname}: graphc lacks this on purpose. {advice}",
                                  name=fullname)
    return MissingModuleError(
        f"No module named '{fullname}': graphc does not provide it (see "
        "docs/porting_from_paddle.md for the Paddle 1.8 APIs that port)", name=fullname)


class _RefuseMissingModules(importlib.abc.MetaPathFinder):
    """``graphc.fluid.dygraph`` (and the other modules in _MISSING_MODULES) import as empty
    stubs; a module under one (``graphc.fluid.dygraph.base``), any other module graphc.fluid
    lacks and Paddle's download datasets (``graphc.dataset.mnist``) raise MissingModuleError
    with the advice; ``graphc.fluid.layers.<m>`` is graphc.layers' own module ``<m>``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("graphc.fluid."):
            rel = fullname.removeprefix("graphc.fluid.")
            if rel.split(".")[0] in _MISSING_MODULES:
                if "." not in rel:
                    return importlib.machinery.ModuleSpec(fullname, _StubLoader(),
                                                          is_package=True)
                spec = paddle_module_spec(fullname, rel)  # dygraph.base: loads, as a stub
                if spec is not None:
                    return spec
                raise MissingModuleError(f"{fullname}: graphc lacks this on purpose. "
                                         f"{advice_for(rel)}", name=fullname)
            if rel.startswith("layers."):
                # fluid.layers *is* graphc.layers: its submodules are graphc.layers' own
                # modules under a second name, never a second copy loaded from the same file
                real = "graphc." + rel
                if _module_exists(real):
                    return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real))
                spec = paddle_module_spec(fullname, rel)  # layers.control_flow: a view
                if spec is not None:
                    return spec
                raise _no_module(fullname, rel)
            if importlib.machinery.PathFinder.find_spec(fullname, path) is None:
                spec = paddle_module_spec(fullname, rel)  # contrib.utils: loads, as a stub
                if spec is not None:
                    return spec
                raise _no_module(fullname, rel)
        elif fullname.startswith("graphc.dataset."):
            name = fullname.removeprefix("graphc.dataset.").split(".")[0]
            if fullname == f"graphc.dataset.{name}" and name in _READABLE_DATASETS:
                return importlib.machinery.ModuleSpec(
                    fullname, _AliasLoader(f"graphc.dataio.paddle_datasets.{name}"))
            if name in _DOWNLOAD_DATASETS:
                raise MissingModuleError(f"{fullname}: {download_dataset_advice(name)}",
                                         name=fullname)
        return None


def install_finder() -> None:
    if not any(isinstance(f, _RefuseMissingModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _RefuseMissingModules())


def delegating_getattr(module_name: str, base, aliases: dict[str, str] | None = None):
    """A module ``__getattr__`` for a thin fluid module over graphc module ``base``: names
    (and Paddle's alias spellings) resolve in ``base`` when asked for, so the fluid module
    sees what is added to ``base`` later; anything else is a MissingAPIError."""
    aliases = aliases or {}

    def __getattr__(name: str):
        if not name.startswith("__"):
            for candidate in (name, aliases.get(name)):
                if candidate is not None and hasattr(base, candidate):
                    return getattr(base, candidate)
        raise missing(module_name, name)

    return __getattr__

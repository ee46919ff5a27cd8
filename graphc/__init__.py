"""graphc: build Paddle-Fluid-style programs, lower them to an SSA IR, rewrite them with
passes chosen by a BuildStrategy, and run them on JAX/XLA."""

import importlib
import os
import sys

from . import (
    layers,
    ops,  # noqa: F401  (every op definition registers; JAX-free)
)
from ._old_paths import OLD_PATHS, install
from .backends.data_checks import DataError
from .backends.selected_rows import SelectedRows
from .build import initializer, regularizer
from .build import optimizers as optimizer
from .build.backward import append_backward
from .build.param_attr import ParamAttr
from .distributed.strategy import DistributedStrategy
from .ir import (
    Block,
    Graph,
    GraphcError,
    OpDefinitionError,
    Operator,
    Parameter,
    ParseError,
    Program,
    ProgramError,
    ShapeError,
    TensorType,
    UnknownOpError,
    Variable,
    VerifyError,
    default_main_program,
    default_startup_program,
    lower,
    parse,
    program_guard,
    unique_name,
    verify,
)
from .layers.tensor import declare_data as data  # fluid.data's rule: the shape as given
from .runtime.checkpoint import CheckpointError, load, save
from .runtime.compile_cache import compilation_cache_dir, set_compilation_cache
from .runtime.compiled_program import CompiledProgram
from .runtime.devices import DeviceError, configure_cpu_devices, cpu_places, cuda_places
from .runtime.executor import Executor, FeedError, FetchError
from .runtime.parallel_executor import ParallelExecutor
from .runtime.places import CPUPlace, CUDAPlace, is_compiled_with_cuda
from .runtime.scope import Scope, global_scope, scope_guard
from .strategy import BuildStrategy, ExecutionStrategy, StrategyError

# CPU_NUM (the seeds' way to ask for CPU replicas) must reach XLA before its CPU backend
# starts, so importing graphc applies it (a bad value is reported when devices are used).
if os.environ.get("CPU_NUM", "").strip().isdigit() and int(os.environ["CPU_NUM"]) > 0:
    configure_cpu_devices()

# user-facing modules: DataLoader, datasets, and the Paddle surface (graphc/fluid/):
# ``import graphc as paddle`` gives paddle.fluid, paddle.batch, paddle.reader.* and
# paddle.enable_static(); ``graphc.reader`` is an alias of the reader decorators' module,
# so ``import graphc.reader`` works too.
# version: paddle.version, which scripts read after a bare `import paddle`
from . import fluid, version  # noqa: E402
from .dataio import dataset, io  # noqa: E402
from .dataio.dataset import DatasetFactory  # noqa: E402
from .fluid import reader_decorators as reader  # noqa: E402
from .fluid.data_feeder import DataFeeder  # noqa: E402
from .fluid.framework import disable_static, enable_static  # noqa: E402
from .fluid.reader_decorators import batch  # noqa: E402

sys.modules[__name__ + ".reader"] = reader
install()  # graphc.optimizer, graphc.io, graphc.cli, ...: the paths before the layered layout


def __getattr__(name: str):
    if f"{__name__}.{name}" in OLD_PATHS:
        return importlib.import_module(OLD_PATHS[f"{__name__}.{name}"])
    from .fluid._missing import missing
    raise missing(__name__, name)

__version__ = "0.1.0"

__all__ = [
    "DatasetFactory", "dataset", "io", "batch", "disable_static", "enable_static", "fluid",
    "reader", "DataFeeder", "version",
    "DeviceError", "configure_cpu_devices", "cpu_places", "cuda_places",
    "compilation_cache_dir", "set_compilation_cache",
    "BuildStrategy", "CompiledProgram", "DistributedStrategy", "ExecutionStrategy",
    "ParallelExecutor", "StrategyError",
    "append_backward", "optimizer", "regularizer", "CheckpointError", "load", "save",
    "Block", "CPUPlace", "CUDAPlace", "DataError", "Executor", "FeedError", "FetchError",
    "GraphcError",
    "Graph", "OpDefinitionError", "Operator", "ParamAttr", "Parameter", "ParseError", "Program",
    "ProgramError", "Scope", "SelectedRows", "ShapeError", "TensorType", "UnknownOpError",
    "Variable", "VerifyError", "data", "default_main_program", "default_startup_program",
    "global_scope", "initializer", "is_compiled_with_cuda", "layers", "lower", "parse",
    "program_guard", "scope_guard", "unique_name", "verify",
]

"""The Paddle-shaped surface: ``import graphc.fluid as fluid`` mirrors ``paddle.fluid``'s
module tree and adapts graphc's own IR, passes, backends and runtime to Paddle's spellings.

Porting rule: replace ``paddle`` by ``graphc`` in a Fluid 1.x script's import lines
(``import paddle.fluid as fluid`` -> ``import graphc.fluid as fluid``, ``import paddle`` ->
``import graphc as paddle``). ``fluid.layers`` *is* ``graphc.layers``; APIs graphc lacks on
purpose (dygraph, most of contrib) raise MissingAPIError with advice.
"""

import sys as _sys

from .. import layers
from ._missing import MissingAPIError, MissingModuleError, install_finder, missing

install_finder()

from ..layers import device as _device  # noqa: E402,F401  (fluid.layers.device)

# fluid.layers is graphc.layers itself, so layers added there appear here; its loaded
# submodules get their fluid names too (``import paddle.fluid.layers.device`` ports).
_sys.modules[__name__ + ".layers"] = layers
for _key, _module in list(_sys.modules.items()):
    if _key.startswith("graphc.layers."):
        _sys.modules[__name__ + _key.removeprefix("graphc")] = _module

# Paddle 1.8's fluid.layers.<nn|tensor|control_flow|...> modules with their own names
from . import layer_modules as _layer_modules  # noqa: E402

_layer_modules.install()

# Paddle's reader layers need the DataLoader (graphc.dataio), which graphc.layers may not
# import: they join fluid.layers here
from . import py_reader as _py_reader  # noqa: E402

for _name in ("py_reader", "create_py_reader_by_data", "read_file"):
    setattr(layers, _name, getattr(_py_reader, _name))
del _name

from ..build.backward import append_backward, gradients  # noqa: E402
from ..dataio.dataset import DatasetFactory  # noqa: E402  (Paddle 1.8: fluid.DatasetFactory)
from ..layers.tensor import declare_data as data  # noqa: E402  (fluid.data: shape as given)
from . import (  # noqa: E402
    average,
    backward,
    clip,
    compiler,
    core,
    data_feeder,
    dataset,
    executor,
    framework,
    incubate,
    initializer,
    io,
    metrics,
    nets,
    optimizer,
    parallel_executor,
    param_attr,
    reader,
    regularizer,
    unique_name,
    wrapped_decorator,
)
from .compiler import BuildStrategy, CompiledProgram, ExecutionStrategy  # noqa: E402
from .core import (  # noqa: E402
    CPUPlace,
    CUDAPinnedPlace,
    CUDAPlace,
    LoDTensor,
    LoDTensorArray,
    Scope,
    create_lod_tensor,
    create_random_int_lodtensor,
)
from .executor import Executor, global_scope, scope_guard  # noqa: E402
from .framework import (  # noqa: E402
    Parameter,
    Program,
    Variable,
    cpu_places,
    cuda_pinned_places,
    cuda_places,
    default_main_program,
    default_startup_program,
    device_guard,
    disable_static,
    enable_static,
    get_flags,
    in_dygraph_mode,
    is_compiled_with_cuda,
    name_scope,
    program_guard,
    require_version,
    set_flags,
)
from .incubate import fleet  # noqa: E402
from .input import embedding, one_hot  # noqa: E402
from .parallel_executor import ParallelExecutor  # noqa: E402
from .param_attr import ParamAttr, WeightNormParamAttr  # noqa: E402
from .transpiler import DistributeTranspiler, DistributeTranspilerConfig  # noqa: E402

Tensor = LoDTensor

# -- issue 25: framework surface
from . import install_check, profiler  # noqa: E402,F401  (fluid.profiler.profiler(...))

# cvport: Paddle 1.8's fluid re-exports fluid.io's (PaddleCV video loads weights with them)
from .paddle_io import load_program_state, set_program_state  # noqa: E402
from .transpiler.memory_optimization_transpiler import (  # noqa: E402
    memory_optimize,
    release_memory,
)

# -- end issue 25: framework surface

# resolved when asked for in the modules that own their Paddle semantics
_LAZY = {"save": "graphc.dataio.io", "load": "graphc.dataio.io",
         "DataFeeder": "graphc.fluid.data_feeder"}

__all__ = [
    "average", "backward", "create_lod_tensor", "create_random_int_lodtensor", "get_flags",
    "DatasetFactory", "gradients", "memory_optimize", "wrapped_decorator",
    "release_memory", "set_flags",
    "BuildStrategy", "CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "CompiledProgram",
    "ExecutionStrategy", "Executor",
    "DistributeTranspiler", "DistributeTranspilerConfig", "transpiler",
    "LoDTensor", "LoDTensorArray", "MissingAPIError", "MissingModuleError", "ParallelExecutor",
    "ParamAttr",
    "WeightNormParamAttr",
    "Parameter", "Program", "Scope", "Tensor", "Variable", "append_backward", "clip",
    "compiler", "core", "cpu_places", "cuda_pinned_places", "cuda_places", "device_guard",
    "data", "data_feeder", "dataset",
    "default_main_program", "default_startup_program", "disable_static", "embedding",
    "enable_static", "executor", "fleet", "framework", "global_scope", "in_dygraph_mode",
    "incubate",
    "initializer", "io", "is_compiled_with_cuda", "layers", "load", "metrics", "name_scope",
    "nets", "one_hot", "optimizer", "parallel_executor", "param_attr", "program_guard",
    "reader", "regularizer", "require_version", "save", "scope_guard", "unique_name",
    "load_program_state", "set_program_state",
]


def __getattr__(name: str):
    owner = _sys.modules.get(_LAZY.get(name, ""))
    if owner is not None and hasattr(owner, name):
        return getattr(owner, name)
    raise missing(__name__, name)


# -- issue 25: datasets
from ..dataio.data_feed_desc import DataFeedDesc  # noqa: E402  (fluid.DataFeedDesc)
from . import data_feed_desc  # noqa: E402

__all__ += ["DataFeedDesc", "data_feed_desc"]
# -- end issue 25: datasets

# -- port24: fluid.contrib's layers real programs use (basic_lstm, shuffle_batch, ...) and
# the deprecated fluid.evaluator (PaddleCV OCR's EditDistance)
from . import contrib, evaluator  # noqa: E402

__all__ += ["contrib", "evaluator"]
# -- end port24

"""``fluid.core``: the names Fluid scripts take from Paddle's C++ core (places, Scope,
LoDTensor, VarDesc.VarType dtypes, EOFException), backed by graphc's runtime."""

from __future__ import annotations

from ..dataio import io as _io
from ..runtime.lod import (  # the host LoD value and its checks live in the runtime
    LoDError,
    LoDTensor,
    LoDTensorArray,
    create_lod_tensor,
    create_random_int_lodtensor,
)
from ..runtime.places import (
    CPUPlace,
    CUDAPinnedPlace,
    CUDAPlace,
    Place,
    gpu_count,
    is_compiled_with_cuda,
)
from ..runtime.scope import Scope
from ._missing import missing

__all__ = ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "EOFException", "LoDError", "LoDTensor",
           "LoDTensorArray",
           "Place", "Scope",
           "VarDesc", "create_lod_tensor", "create_random_int_lodtensor",
           "get_cuda_device_count", "is_compiled_with_cuda"]


# The DataLoader's end-of-epoch signal (``except fluid.core.EOFException: loader.reset()``):
# graphc.io's own class, so both spellings catch the same exception.
EOFException = _io.EOFException


def get_cuda_device_count() -> int:
    return gpu_count()  # never starts JAX's backends where no GPU backend could start


def is_compiled_with_mkldnn() -> bool:
    return False


class VarDesc:
    """``core.VarDesc.VarType.FP32`` ... : each dtype is graphc's dtype name, so
    ``var.dtype == core.VarDesc.VarType.FP32`` holds as it does in Paddle."""

    class VarType:
        BOOL = "bool"
        INT8 = "int8"
        UINT8 = "uint8"
        INT16 = "int16"
        INT32 = "int32"
        INT64 = "int64"
        FP16 = "float16"
        BF16 = "bfloat16"
        FP32 = "float32"
        FP64 = "float64"
        # variable kinds: graphc feeds dense tensors; row-sparse gradients are SELECTED_ROWS
        LOD_TENSOR = "lod_tensor"
        SELECTED_ROWS = "selected_rows"
        LOD_TENSOR_ARRAY = "lod_tensor_array"
        FEED_MINIBATCH = "feed_minibatch"
        FETCH_LIST = "fetch_list"
        STEP_SCOPES = "step_scopes"
        READER = "reader"
        RAW = "raw"


# -- issue 25: inference API (Paddle's core spellings; graphc.fluid.inference)
from .inference import (  # noqa: E402
    AnalysisConfig,
    AnalysisPredictor,
    NativeConfig,
    NativePaddlePredictor,
    PaddleBuf,
    PaddleDType,
    PaddlePassBuilder,
    PaddlePlace,
    PaddlePredictor,
    PaddleTensor,
    ZeroCopyTensor,
    create_paddle_predictor,
    create_predictor,
)

__all__ += ["AnalysisConfig", "AnalysisPredictor", "NativeConfig", "NativePaddlePredictor",
            "PaddleBuf", "PaddleDType", "PaddlePassBuilder", "PaddlePlace", "PaddlePredictor",
            "PaddleTensor", "ZeroCopyTensor", "create_paddle_predictor", "create_predictor"]
# -- end issue 25: inference API


# -- issue 25: framework surface
def _set_eager_deletion_mode(threshold: float, fraction: float, fast_mode: bool) -> None:
    """Paddle's garbage-collection switch for its executor's temporaries: XLA frees a step's
    temporaries itself (they live inside one compiled program), so there is nothing to set."""
# -- end issue 25: framework surface


# -- unitfw
def set_feed_variable(scope, tensor, var_name: str, index: int) -> None:
    """Put ``tensor`` at ``index`` of the feed list ``var_name`` of ``scope`` (Paddle's
    feed-op input; graphc's Executor takes feeds as a dict, this serves code that sets
    the list itself)."""
    items = scope.tensor_list(var_name)
    items.extend([None] * (index + 1 - len(items)))
    items[index] = tensor


def get_fetch_variable(scope, var_name: str, index: int):
    """The tensor at ``index`` of the fetch list ``var_name`` of ``scope``."""
    from ..ir.errors import ArgumentValueError
    items = scope.tensor_list(var_name)
    if not 0 <= index < len(items) or items[index] is None:
        raise ArgumentValueError(f"get_fetch_variable: '{var_name}' holds {len(items)} "
                                 f"tensors, none at index {index}")
    return items[index]
# -- end unitfw


def __getattr__(name: str):
    raise missing(__name__, name)

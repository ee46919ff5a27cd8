"""Paddle's inference API (``fluid.core.AnalysisConfig``, ``NativeConfig``, ``PaddleTensor``,
``create_paddle_predictor``, zero-copy tensors) over graphc's Predictor (runtime/predictor.py).

A predictor loads the model its config names with ``fluid.io.load_inference_model`` (every
format that reads) into a scope of its own and runs it as one compiled XLA call per input
signature. Config switches that choose Paddle's engines, passes or memory pools are kept and
reported back (``config.ir_optim()`` ...) but change nothing: XLA compiles the whole program
whatever they say, and graphc's passes are exact (see docs/porting_from_paddle.md).
"""

from __future__ import annotations

import enum
import os

import numpy as np

from ..dataio.inference import load_predictor
from ..runtime.places import CPUPlace, CUDAPlace
from ..runtime.predictor import Predictor, PredictorError
from .inference_tensors import (
    PaddleBuf,
    PaddleDType,
    PaddlePlace,
    PaddleTensor,
    ZeroCopyTensor,
    _output,
    _tensor_array,
)

__all__ = ["AnalysisConfig", "AnalysisPredictor", "NativeConfig", "NativePaddlePredictor",
           "PaddleBuf", "PaddleDType", "PaddlePassBuilder", "PaddlePlace", "PaddlePredictor",
           "PaddleTensor", "PredictorError", "ZeroCopyTensor", "create_paddle_predictor",
           "create_predictor"]


# -- configs ----------------------------------------------------------------------------------
class _Config:
    """What both configs share: the model's place on disk and the device."""

    def _model(self) -> tuple[str | None, str | None, str | None]:
        """(directory, model file name, params file name) for load_inference_model."""
        prog, params = self._prog_path(), self._params_path()
        if prog:
            params = os.path.abspath(params) if params else None
            return os.path.dirname(os.path.abspath(prog)), os.path.basename(prog), params
        return self._dir(), None, None

    def _place(self):
        return CUDAPlace(self._device_id()) if self._gpu() else CPUPlace()

    def _make_predictor(self) -> PaddlePredictor:
        directory, model, params = self._model()
        return PaddlePredictor(load_predictor(directory, model, params, self._place()), self)


class NativeConfig(_Config):
    """``NativeConfig()`` with Paddle's fields: ``model_dir``, or ``prog_file`` and
    ``param_file``; ``use_gpu``, ``device``, ``fraction_of_gpu_memory`` (XLA sizes its own
    pool: kept, unused), ``specify_input_name`` (inputs are matched by name when they have
    one, by position otherwise, whatever it says)."""

    def __init__(self):
        self.model_dir = ""
        self.prog_file = ""
        self.param_file = ""
        self.use_gpu = False
        self.use_xpu = False
        self.use_npu = False
        self.device = 0
        self.fraction_of_gpu_memory = -1.0
        self.specify_input_name = False
        self._threads = 1

    def set_cpu_math_library_num_threads(self, n: int) -> None:
        self._threads = int(n)

    def cpu_math_library_num_threads(self) -> int:
        return self._threads

    def _prog_path(self):
        return self.prog_file

    def _params_path(self):
        return self.param_file

    def _dir(self):
        return self.model_dir

    def _gpu(self) -> bool:
        return bool(self.use_gpu)

    def _device_id(self) -> int:
        return int(self.device)


class AnalysisConfig(_Config):
    """``AnalysisConfig()``, ``AnalysisConfig(model_dir)``, ``AnalysisConfig(prog_file,
    params_file)`` or ``AnalysisConfig(other)`` (a copy). Switches for Paddle's passes, MKLDNN,
    TensorRT, memory reuse, profiling and feed/fetch ops are recorded and read back, and
    change nothing (see the module doc)."""

    Precision = enum.IntEnum("Precision", {"Float32": 0, "Int8": 1, "Half": 2, "Bfloat16": 3})

    def __init__(self, model_dir=None, params_file=None):
        if isinstance(model_dir, AnalysisConfig):
            self.__dict__.update({k: (dict(v) if isinstance(v, dict) else v)
                                  for k, v in model_dir.__dict__.items()})
            return
        self._model_dir, self._prog, self._params = "", "", ""
        if params_file is not None:
            self._prog, self._params = str(model_dir), str(params_file)
        elif model_dir is not None:
            self._model_dir = str(model_dir)
        self._use_gpu, self._device, self._pool_mb = False, 0, 100
        self._threads = 1
        self._switches = {"ir_optim": True, "use_feed_fetch_ops": True,
                          "specify_input_name": False, "memory_optim": False,
                          "profile": False, "glog_info_disabled": False, "mkldnn": False,
                          "tensorrt_engine": False, "ir_debug": False}
        self._deleted_passes: list[str] = []

    # model
    def set_model(self, model_dir_or_prog, params_file=None) -> None:
        self.__init__(model_dir_or_prog, params_file)

    def set_prog_file(self, path: str) -> None:
        self._prog = str(path)

    def set_params_file(self, path: str) -> None:
        self._params = str(path)

    def model_dir(self) -> str:
        return self._model_dir

    def prog_file(self) -> str:
        return self._prog

    def params_file(self) -> str:
        return self._params

    def _prog_path(self):
        return self._prog

    def _params_path(self):
        return self._params

    def _dir(self):
        return self._model_dir

    # device
    def enable_use_gpu(self, memory_pool_init_size_mb: int, device_id: int = 0,
                       precision_mode=None) -> None:
        self._use_gpu, self._pool_mb, self._device = True, int(memory_pool_init_size_mb), \
            int(device_id)

    def disable_gpu(self) -> None:
        self._use_gpu = False

    def use_gpu(self) -> bool:
        return self._use_gpu

    def gpu_device_id(self) -> int:
        return self._device

    def memory_pool_init_size_mb(self) -> int:
        return self._pool_mb

    def fraction_of_gpu_memory_for_pool(self) -> float:
        return 0.0

    def _gpu(self) -> bool:
        return self._use_gpu

    def _device_id(self) -> int:
        return self._device

    def set_cpu_math_library_num_threads(self, n: int) -> None:
        self._threads = int(n)

    def cpu_math_library_num_threads(self) -> int:
        return self._threads

    # switches that change nothing on XLA (recorded, read back)
    def _switch(self, name: str, x: bool = True) -> None:
        self._switches[name] = bool(x)

    def switch_ir_optim(self, x: bool = True) -> None:
        self._switch("ir_optim", x)

    def ir_optim(self) -> bool:
        return self._switches["ir_optim"]

    def switch_use_feed_fetch_ops(self, x: bool = True) -> None:
        self._switch("use_feed_fetch_ops", x)

    def use_feed_fetch_ops_enabled(self) -> bool:
        return self._switches["use_feed_fetch_ops"]

    def switch_specify_input_names(self, x: bool = True) -> None:
        self._switch("specify_input_name", x)

    def specify_input_name(self) -> bool:
        return self._switches["specify_input_name"]

    def enable_memory_optim(self, x: bool = True) -> None:
        self._switch("memory_optim", x)

    def enable_profile(self) -> None:
        self._switch("profile")

    def disable_glog_info(self) -> None:
        self._switch("glog_info_disabled")

    def glog_info_disabled(self) -> bool:
        return self._switches["glog_info_disabled"]

    def enable_mkldnn(self) -> None:
        self._switch("mkldnn")

    def mkldnn_enabled(self) -> bool:
        return self._switches["mkldnn"]

    def switch_ir_debug(self, x: bool = True) -> None:
        self._switch("ir_debug", x)

    def enable_tensorrt_engine(self, workspace_size=1 << 30, max_batch_size=1,
                               min_subgraph_size=3, precision_mode=None, use_static=False,
                               use_calib_mode=True) -> None:
        self._switch("tensorrt_engine")

    def tensorrt_engine_enabled(self) -> bool:
        return self._switches["tensorrt_engine"]

    def delete_pass(self, name: str) -> None:
        self._deleted_passes.append(str(name))

    def pass_builder(self) -> PaddlePassBuilder:
        return PaddlePassBuilder(self._deleted_passes)

    def to_native_config(self) -> NativeConfig:
        native = NativeConfig()
        native.model_dir, native.prog_file, native.param_file = \
            self._model_dir, self._prog, self._params
        native.use_gpu, native.device = self._use_gpu, self._device
        native.specify_input_name = self._switches["specify_input_name"]
        native.set_cpu_math_library_num_threads(self._threads)
        return native

    def summary(self) -> str:
        rows = [("model_dir", self._model_dir), ("prog_file", self._prog),
                ("params_file", self._params), ("use_gpu", self._use_gpu),
                ("cpu_math_library_num_threads", self._threads),
                *sorted(self._switches.items())]
        return "\n".join(f"{k}: {v}" for k, v in rows)


class PaddlePassBuilder:
    """``config.pass_builder()``: Paddle's pass list edits, recorded (XLA does the fusing)."""

    def __init__(self, deleted: list):
        self._deleted = deleted
        self._passes: list[str] = []

    def append_pass(self, name: str) -> None:
        self._passes.append(str(name))

    def insert_pass(self, idx: int, name: str) -> None:
        self._passes.insert(int(idx), str(name))

    def delete_pass(self, name) -> None:
        self._deleted.append(str(name))

    def all_passes(self) -> list[str]:
        return list(self._passes)

    def set_passes(self, names) -> None:
        self._passes = [str(n) for n in names]

    def turn_on_debug(self) -> None:
        pass


# -- the predictor ----------------------------------------------------------------------------
class PaddlePredictor:
    """What ``create_paddle_predictor`` / ``create_predictor`` return (also
    ``AnalysisPredictor``, ``NativePaddlePredictor``): ``run([PaddleTensor, ...])`` returns
    the outputs as PaddleTensors; the zero-copy way is ``get_input_tensor(name)`` (or
    ``get_input_handle``) ``.copy_from_cpu(array)``, ``zero_copy_run()`` (or ``run()``), then
    ``get_output_tensor(name).copy_to_cpu()``. ``clone()`` shares the parameters and the
    compiled steps, with inputs and outputs of its own."""

    def __init__(self, core: Predictor, config=None):
        self.core, self.config = core, config
        self._inputs: dict[str, np.ndarray] = {}
        self._shapes: dict[str, list] = {}
        self._lods: dict[str, list] = {}
        self._outputs: dict = {}

    def get_input_names(self) -> list[str]:
        return list(self.core.feed_names)

    def get_output_names(self) -> list[str]:
        return list(self.core.fetch_names)

    def get_input_tensor(self, name: str) -> ZeroCopyTensor:
        self.core.feed_var(name)  # an unknown name fails here, naming the inputs
        return ZeroCopyTensor(self, name, True)

    def get_output_tensor(self, name: str) -> ZeroCopyTensor:
        if name not in self.core.fetch_names:
            raise PredictorError(f"the model has no output '{name}'; its outputs are "
                                 f"{list(self.core.fetch_names)}")
        return ZeroCopyTensor(self, name, False)

    get_input_handle = get_input_tensor
    get_output_handle = get_output_tensor

    def get_input_tensor_shape(self) -> dict:
        return {n: list(self.core.feed_var(n).shape) for n in self.core.feed_names}

    def run(self, inputs=None):
        """``run([PaddleTensor, ...])``: the outputs as PaddleTensors (inputs are matched by
        name when named, by position otherwise). ``run()``: the zero-copy run."""
        if inputs is None:
            self.zero_copy_run()
            return None
        if isinstance(inputs, PaddleTensor):
            inputs = [inputs]
        if not isinstance(inputs, list | tuple) or not all(
                isinstance(t, PaddleTensor) for t in inputs):
            raise PredictorError("PaddlePredictor.run takes a list of PaddleTensors (or "
                                 "nothing, for a zero-copy run), got "
                                 f"{type(inputs).__name__}")
        names = self.core.feed_names
        if len(inputs) > len(names):
            raise PredictorError(f"got {len(inputs)} input tensors for the model's "
                                 f"{len(names)} inputs {names}")
        feed, lods = {}, {}
        for i, t in enumerate(inputs):
            name = t.name or names[i]
            self.core.feed_var(name)
            if name in feed:
                raise PredictorError(f"input '{name}' is given twice")
            feed[name] = _tensor_array(t)
            if t.lod:
                lods[name] = t.lod
        values = self.core.run(feed, lods or None)
        return [_output(n, v) for n, v in zip(self.core.fetch_names, values)]

    def zero_copy_run(self) -> bool:
        """Run on the inputs set through the zero-copy tensors; outputs stay readable with
        ``get_output_tensor(name).copy_to_cpu()``."""
        feed = self._inputs  # read, never changed, by the core's run
        lods = {n: lod for n, lod in self._lods.items() if lod and n in feed}
        values = self.core.run(feed, lods or None)
        self._outputs = dict(zip(self.core.fetch_names, values))
        return True

    def clone(self) -> PaddlePredictor:
        return PaddlePredictor(self.core.clone(), self.config)

    def clear_intermediate_tensor(self) -> None:
        """Nothing to clear: a run's intermediates live inside its one XLA call."""

    def try_shrink_memory(self) -> int:
        return 0


AnalysisPredictor = NativePaddlePredictor = PaddlePredictor


def create_paddle_predictor(config) -> PaddlePredictor:
    """A predictor for the model ``config`` (a NativeConfig or AnalysisConfig) names."""
    if not isinstance(config, _Config):
        raise PredictorError("create_paddle_predictor expects a NativeConfig or AnalysisConfig, "
                             f"got {type(config).__name__}")
    return config._make_predictor()


def create_predictor(config) -> PaddlePredictor:
    """Paddle's ``paddle_infer`` spelling of ``create_paddle_predictor``."""
    return create_paddle_predictor(config)


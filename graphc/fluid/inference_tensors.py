"""Paddle's inference tensors: ``PaddleDType``, ``PaddleBuf``, ``PaddleTensor`` (the
``predictor.run`` inputs and outputs) and the zero-copy ``ZeroCopyTensor`` handles."""

from __future__ import annotations

import enum

import numpy as np

from ..runtime.lod import LoDError, LoDTensor
from ..runtime.predictor import PredictorError

__all__ = ["PaddleBuf", "PaddleDType", "PaddlePlace", "PaddleTensor", "ZeroCopyTensor"]


class PaddleDType(enum.IntEnum):
    """The element types of PaddleTensor and zero-copy tensors (Paddle's numbering)."""

    FLOAT32 = 0
    INT64 = 1
    INT32 = 2
    UINT8 = 3
    INT8 = 4
    FLOAT16 = 5
    BOOL = 6


class PaddlePlace(enum.IntEnum):
    UNK = -1
    CPU = 0
    GPU = 1
    XPU = 2


_NUMPY = {PaddleDType.FLOAT32: np.float32, PaddleDType.INT64: np.int64,
          PaddleDType.INT32: np.int32, PaddleDType.UINT8: np.uint8, PaddleDType.INT8: np.int8,
          PaddleDType.FLOAT16: np.float16, PaddleDType.BOOL: np.bool_}
_OF_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items()}


def _paddle_dtype(dtype, what: str) -> PaddleDType:
    try:
        return _OF_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise PredictorError(f"{what}: Paddle's inference tensors hold float32, float16, "
                             f"int64, int32, uint8, int8 or bool, not {dtype}") from None


# -- PaddleBuf / PaddleTensor ---------------------------------------------------------------
class PaddleBuf:
    """A flat host buffer. ``PaddleBuf(n)``: n zero bytes; ``PaddleBuf(array)``: a copy of
    a float32/int32/int64 array (float64 becomes float32); ``PaddleBuf(list)``: float32."""

    def __init__(self, data=0):
        self._array = _buffer_array(data)

    def _typed(self, dtype) -> np.ndarray:
        raw = self._array.view(np.uint8).reshape(-1)
        size = np.dtype(dtype).itemsize
        return raw[: raw.size - raw.size % size].view(dtype)

    def float_data(self) -> list:
        return self._typed(np.float32).tolist()

    def int64_data(self) -> list:
        return self._typed(np.int64).tolist()

    def int32_data(self) -> list:
        return self._typed(np.int32).tolist()

    def tolist(self, dtype: str) -> list:
        if dtype not in ("float32", "int32", "int64"):
            raise PredictorError(f"PaddleBuf.tolist: dtype must be 'float32', 'int32' or "
                                 f"'int64', got {dtype!r}")
        return self._typed(np.dtype(dtype)).tolist()

    def length(self) -> int:
        """The size in bytes."""
        return int(self._array.nbytes)

    def empty(self) -> bool:
        return self._array.nbytes == 0

    def resize(self, length: int) -> None:
        raw = np.zeros(int(length), np.uint8)
        old = self._array.view(np.uint8).reshape(-1)[: raw.size]
        raw[: old.size] = old
        self._array = raw

    def reset(self, data) -> None:
        self._array = _buffer_array(data)

    def __repr__(self) -> str:
        return f"PaddleBuf({self.length()} bytes)"


def _buffer_array(data) -> np.ndarray:
    if isinstance(data, int | np.integer) and not isinstance(data, bool):
        if data < 0:
            raise PredictorError(f"PaddleBuf: a size must be at least 0, got {data}")
        return np.zeros(int(data), np.uint8)
    if isinstance(data, np.ndarray):
        arr = data.astype(np.float32) if data.dtype == np.float64 else data
        _paddle_dtype(arr.dtype, "PaddleBuf")
        return np.array(arr, copy=True, order="C").reshape(-1)
    try:
        return np.asarray(data, np.float32).reshape(-1)  # Paddle's list overload: floats
    except (TypeError, ValueError):
        raise PredictorError(f"PaddleBuf takes a size, a numpy array or a list of numbers, "
                             f"got {type(data).__name__}") from None


class PaddleTensor:
    """A named input or output: ``shape`` (list), ``data`` (PaddleBuf), ``dtype``
    (PaddleDType), ``lod`` (offsets per level, ``[[0, 2, 5]]``). ``PaddleTensor(array,
    name='', lod=[], copy=True)`` fills all of them from a numpy array."""

    def __init__(self, data=None, name: str = "", lod=None, copy: bool = True):
        self.name = name
        self.lod = [list(level) for level in (lod or [])]
        if data is None:
            self.shape, self.data, self.dtype = [], PaddleBuf(0), PaddleDType.FLOAT32
            return
        arr = np.asarray(data)
        self.dtype = _paddle_dtype(arr.dtype, f"PaddleTensor '{name}'")
        self.shape = list(arr.shape)
        self.data = PaddleBuf(arr)

    def as_ndarray(self) -> np.ndarray:
        return _tensor_array(self)

    def __repr__(self) -> str:
        return (f"PaddleTensor(name={self.name!r}, shape={self.shape}, "
                f"dtype={self.dtype.name if isinstance(self.dtype, PaddleDType) else self.dtype}"
                f", lod={self.lod})")


def _tensor_array(t: PaddleTensor) -> np.ndarray:
    """The tensor's buffer as an array of its dtype and shape (a view, no copy)."""
    what = f"PaddleTensor '{t.name}'" if t.name else "a PaddleTensor"
    try:
        dtype = _NUMPY[PaddleDType(t.dtype)]
    except ValueError:
        raise PredictorError(f"{what}: dtype {t.dtype!r} is not a PaddleDType") from None
    if not isinstance(t.data, PaddleBuf):
        raise PredictorError(f"{what}: data must be a PaddleBuf, got {type(t.data).__name__}")
    shape = [int(d) for d in t.shape]
    raw = t.data._array.view(np.uint8).reshape(-1)
    need = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if any(d < 0 for d in shape) or raw.size != need:
        raise PredictorError(f"{what}: shape {shape} of {np.dtype(dtype).name} needs {need} "
                             f"bytes but its PaddleBuf holds {raw.size}")
    return raw.view(dtype).reshape(shape)


def _output(name: str, value) -> PaddleTensor:
    out = PaddleTensor(np.asarray(value), name)
    if isinstance(value, LoDTensor):
        out.lod = value.lod()
    return out


class ZeroCopyTensor:
    """A predictor's input or output by name (``get_input_tensor`` / ``get_input_handle``):
    ``copy_from_cpu(array)`` sets an input (a copy; its shape becomes the tensor's),
    ``set_lod(offsets)`` its LoD, ``copy_to_cpu()`` reads an output after the run;
    ``reshape(shape)`` reshapes the data held (or says the shape the next copy must have)."""

    def __init__(self, predictor, name: str, is_input: bool):
        self._predictor, self.name, self._is_input = predictor, name, is_input

    def _what(self) -> str:
        return f"{'input' if self._is_input else 'output'} '{self.name}'"

    def _need_input(self, method: str) -> None:
        if not self._is_input:
            raise PredictorError(f"{method} on {self._what()}: only inputs are written")

    def reshape(self, shape) -> None:
        self._need_input("reshape")
        shape = [int(d) for d in shape]
        held = self._predictor._inputs.get(self.name)
        if held is not None and held.size == int(np.prod(shape, dtype=np.int64)):
            self._predictor._inputs[self.name] = held.reshape(shape)
        self._predictor._shapes[self.name] = shape

    def copy_from_cpu(self, data) -> None:
        if not self._is_input:  # (inline: this runs for every input of every call)
            self._need_input("copy_from_cpu")
        arr = np.array(data, copy=True, order="C")
        if arr.dtype not in _OF_NUMPY:
            _paddle_dtype(arr.dtype, f"copy_from_cpu of {self._what()}")
        predictor = self._predictor
        predictor._inputs[self.name] = arr
        if predictor._shapes:  # a reshape's shape gives way to the data's (see shape())
            predictor._shapes.pop(self.name, None)

    def set_lod(self, lod) -> None:
        if not self._is_input:
            self._need_input("set_lod")
        held = self._predictor._lods.get(self.name)
        # the offsets held already (a list of ints, equal element by element): nothing to
        # convert. Why: int() of each offset costs ~0.1 us, ~7 us per call for 64 sequences,
        # while the comparison costs next to nothing; an equal number converts to that int
        if (held is not None and type(lod) is list and len(lod) == len(held) == 1
                and type(lod[0]) is list and lod[0] == held[0]):
            return
        try:
            levels = [[x if type(x) is int else int(x) for x in level] for level in lod]
        except (TypeError, ValueError):
            raise LoDError(f"set_lod of {self._what()}: give a list of offset lists, "
                           f"e.g. [[0, 2, 5]], got {lod!r:.60}") from None
        self._predictor._lods[self.name] = levels

    def lod(self) -> list:
        if self._is_input:
            return [list(level) for level in self._predictor._lods.get(self.name, [])]
        value = self._output_value()
        return value.lod() if isinstance(value, LoDTensor) else []

    def _output_value(self):
        try:
            return self._predictor._outputs[self.name]
        except KeyError:
            raise PredictorError(f"{self._what()} holds nothing yet: run the predictor "
                                 "(zero_copy_run() or run()) first") from None

    def copy_to_cpu(self) -> np.ndarray:
        if self._is_input:
            held = self._predictor._inputs.get(self.name)
            if held is None:
                raise PredictorError(f"{self._what()} holds nothing yet: copy_from_cpu first")
            return held.copy()
        return np.array(self._output_value(), copy=True)

    def shape(self) -> list:
        if self._is_input:  # the last reshape's, else the data's (copy_from_cpu clears it)
            shape = self._predictor._shapes.get(self.name)
            held = self._predictor._inputs.get(self.name)
            return list(shape if shape is not None else held.shape if held is not None
                        else [])
        return list(np.shape(np.asarray(self._output_value())))

    def type(self) -> PaddleDType:
        if self._is_input:
            held = self._predictor._inputs.get(self.name)
            dtype = held.dtype if held is not None else self._predictor.core.feed_var(
                self.name).dtype
        else:
            dtype = np.asarray(self._output_value()).dtype
        return _paddle_dtype(dtype, self._what())

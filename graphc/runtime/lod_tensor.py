"""LoD values on the host: Paddle's LoDTensor and LoDTensorArray, their sequence-length checks
and constructors (create_lod_tensor); runtime/lod.py packs them into a step and back out."""

from __future__ import annotations

import numpy as np

from ..ir.errors import GraphcError
from ..ir.types import MAX_LOD_LEVEL
from .tensor_methods import TensorMethods


class LoDError(GraphcError):
    """Sequence lengths that do not describe a tensor: negative, a sum that is not the
    tensor's row count, too many levels."""


def lengths_problem(lengths, rows: int | None) -> str | None:
    """Why ``lengths`` (recursive sequence lengths) cannot describe ``rows`` rows, or None;
    ``rows=None`` checks only that the levels agree with each other."""
    if not isinstance(lengths, list | tuple) or len(lengths) > MAX_LOD_LEVEL:
        return f"expected a list of at most {MAX_LOD_LEVEL} levels of lengths"
    expect = None
    for i, level in enumerate(lengths):
        if not isinstance(level, list | tuple | np.ndarray):
            return f"level {i} is a {type(level).__name__}, not a list of lengths"
        arr = np.asarray(level)
        if arr.size and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
            return f"level {i} holds a non-integer length"
        if arr.size and arr.min() < 0:
            return f"level {i} holds a negative length"
        if expect is not None and arr.size != expect:
            return (f"level {i} has {arr.size} lengths but level {i - 1}'s lengths sum to "
                    f"{expect}")
        expect = int(arr.sum(dtype=np.int64))
    if lengths and rows is not None and expect != rows:
        return f"the last level's lengths sum to {expect} but the tensor has {rows} rows"
    return None


def _is_lengths(value) -> bool:
    """A Python list of lists of ints (Paddle's ``LoDTensor([[2, 2]])``), not an array."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(level, list) and all(isinstance(n, int) and not isinstance(n, bool)
                                        for n in level) for level in value)


class LoDTensor(TensorMethods):
    """A host tensor and its recursive sequence lengths (Paddle's LoDTensor): what a LoD
    feed takes and a fetch returns with ``return_numpy=False`` (a dense one with an empty
    LoD). ``np.array(t)`` is the packed tokens ``[T, ...]``."""

    def __init__(self, array=None, recursive_seq_lens=None):
        if recursive_seq_lens is None and _is_lengths(array):
            # Paddle's one-argument constructor: LoDTensor(recursive_sequence_lengths), the
            # value set later (graphc's own calls give an array first)
            array, recursive_seq_lens = None, array
        self._host = None if array is None else np.asarray(array)
        self._device = None  # a fetched device array, read back when first asked for
        self._lengths: list[np.ndarray] = []  # int64 per level: packing reads them as is
        if recursive_seq_lens:
            self.set_recursive_sequence_lengths(recursive_seq_lens)

    @classmethod
    def of_fetch(cls, array) -> LoDTensor:
        """A dense fetched value as ``return_numpy=False`` returns it: an empty LoD, the
        device array copied to the host only when its data is read."""
        t = cls()
        t._device = array
        return t

    @property
    def _array(self):
        if self._host is None and self._device is not None:
            self._host = np.asarray(self._device)
        return self._host

    def _device_of(self):
        devices = getattr(self._device, "devices", None)
        return next(iter(devices())) if devices is not None else None

    def _holds(self) -> bool:
        return self._host is not None or self._device is not None

    def _read(self) -> np.ndarray:
        return self._value()

    def _write(self, array) -> None:
        self._host, self._device = (None if array is None else np.asarray(array)), None

    def set(self, array, place=None) -> None:
        from .places import Place
        if place is not None and not isinstance(place, Place):
            raise GraphcError(f"LoDTensor.set: place must be a CPUPlace/CUDAPlace, got "
                              f"{type(place).__name__}")
        try:
            self._host, self._device = np.array(array), None
        except ValueError as e:  # ragged nested lists: numpy's message names no tensor
            raise LoDError(f"LoDTensor.set: the value is not a rectangular array ({e}); give "
                           "the packed tokens as one array and the lengths separately") from None

    def _value(self) -> np.ndarray:
        if self._array is None:
            raise GraphcError("LoDTensor holds no value yet; call t.set(array, place) first")
        return self._array

    def __array__(self, dtype=None, copy=None):
        arr = self._value()
        return arr.astype(dtype) if dtype is not None else arr

    def shape(self) -> list[int]:
        return list(self._value().shape)

    def numpy(self) -> np.ndarray:
        return self._value()

    def _dtype(self):
        from ..ir.types import normalize_dtype
        return normalize_dtype(self._value().dtype)

    # -- LoD ------------------------------------------------------------------------------
    def set_recursive_sequence_lengths(self, lengths) -> None:
        if not isinstance(lengths, list | tuple) or len(lengths) > MAX_LOD_LEVEL or any(
                not isinstance(level, list | tuple | np.ndarray) for level in lengths):
            raise LoDError(f"recursive sequence lengths must be a list of at most "
                           f"{MAX_LOD_LEVEL} lists of lengths, got {lengths!r}")
        levels = []
        for level in lengths:
            arr = np.asarray(level)
            if arr.size and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
                raise LoDError(f"sequence lengths must be lists of integers, got {level!r:.60}")
            levels.append(arr.astype(np.int64).reshape(-1))
        # as Paddle, each level must count the sequences the level above makes now; the rest
        # (signs, rows) is checked when fed (has_valid_recursive_sequence_lengths): the data
        # may come later
        for i in range(1, len(levels)):
            above = int(levels[i - 1].sum())
            if levels[i].size != above:
                raise LoDError(f"recursive sequence lengths {lengths!r:.80} are invalid: level "
                               f"{i} has {levels[i].size} lengths but level {i - 1}'s lengths "
                               f"sum to {above}")
        self._lengths = levels

    def recursive_sequence_lengths(self) -> list[list[int]]:
        return [level.tolist() for level in self._lengths]

    def set_lod(self, lod) -> None:
        """Offsets per level (``[[0, 2, 5]]``), as Paddle's ``set_lod``."""
        lengths = []
        for i, level in enumerate(lod or []):
            level = [int(n) for n in level]
            if not level or level[0] != 0 or any(b < a for a, b in zip(level, level[1:])):
                raise LoDError(f"set_lod: level {i} offsets {level} must start at 0 and "
                               "never decrease")
            lengths.append([b - a for a, b in zip(level, level[1:])])
        # as Paddle, set_lod checks the offsets against the data already set
        rows = None if self._array is None else (self._array.shape[0] if self._array.ndim
                                                 else 0)
        problem = lengths_problem(lengths, rows)
        if problem:
            raise LoDError(f"set_lod: offsets {lod!r:.80} do not describe the tensor: {problem}")
        self.set_recursive_sequence_lengths(lengths)

    def lod(self) -> list[list[int]]:
        return [[0, *np.cumsum(level, dtype=np.int64).tolist()] for level in self._lengths]

    def has_valid_recursive_sequence_lengths(self) -> bool:
        return lengths_problem(self._lengths, self._value().shape[0] if
                               self._value().ndim else 0) is None

    def __repr__(self) -> str:
        lengths = self.recursive_sequence_lengths()
        return f"LoDTensor({self._array!r}, recursive_seq_lens={lengths})"


class LoDTensorArray(list):
    """Paddle's LoDTensorArray: a list of LoDTensors (what a fetched tensor array is with
    ``return_numpy=False``; docs/control_flow.md)."""

    def __init__(self, tensors=()):
        super().__init__()
        for t in tensors:
            self.append(t)

    def append(self, tensor) -> None:
        if not isinstance(tensor, LoDTensor):
            raise GraphcError(f"LoDTensorArray.append: expected a LoDTensor, got "
                              f"{type(tensor).__name__}")
        super().append(tensor)


def create_lod_tensor(data, recursive_seq_lens, place=None) -> LoDTensor:
    """A LoDTensor from a numpy array, a LoDTensor, or a list of sequences (each a list of
    ints: tokens as int64 ``[T, 1]``, as Paddle), with lengths checked against the data."""
    if isinstance(data, LoDTensor):
        data = np.array(data)
    elif isinstance(data, list):
        lens = [len(seq) for seq in data]
        if recursive_seq_lens and [lens] != [list(recursive_seq_lens[-1])]:
            raise LoDError(f"create_lod_tensor: the sequences have lengths {lens} but "
                           f"recursive_seq_lens ends with {recursive_seq_lens[-1]}")
        flat = [tok for seq in data for tok in seq]
        data = np.asarray(flat, dtype=np.int64).reshape(len(flat), 1)
    tensor = LoDTensor()
    tensor.set(np.asarray(data), place)
    tensor.set_recursive_sequence_lengths(list(recursive_seq_lens or []))
    problem = lengths_problem(tensor._lengths, tensor._value().shape[0]
                              if tensor._value().ndim else 0)
    if problem:
        raise LoDError(f"create_lod_tensor: recursive_seq_lens={recursive_seq_lens!r} do not "
                       f"describe data of shape {tensor.shape()}: {problem}")
    return tensor


def create_random_int_lodtensor(recursive_seq_lens, base_shape, place=None, low=0,
                                high=1) -> LoDTensor:
    """Random int64 tokens in ``[low, high]`` of shape ``[total, *base_shape]``."""
    if low > high:  # numpy's randint would say only "low >= high"
        raise LoDError(f"create_random_int_lodtensor: low={low} is greater than high={high} "
                       "(the range [low, high] is inclusive)")
    total = int(sum(recursive_seq_lens[-1])) if recursive_seq_lens else 0
    data = np.random.randint(low, high + 1, size=[total, *base_shape]).astype(np.int64)
    return create_lod_tensor(data, recursive_seq_lens, place)

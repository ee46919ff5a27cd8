"""The host-tensor methods Paddle 1.8's ``core.Tensor`` has beyond data and LoD (dims, element
access, place, copies), shared by the LoDTensor of feeds/fetches and the scope's Tensor."""

from __future__ import annotations

import numpy as np

from ..ir.errors import GraphcError

# Paddle's DataLayout names (StringToDataLayout)
_LAYOUTS = ("NHWC", "NCHW", "NCDHW", "NDHWC", "AnyLayout", "ANYLAYOUT", "MKLDNNLAYOUT")


class TensorMethods:
    """Mixed into a class that defines ``_read()`` (its value as numpy; raises when it holds
    none), ``_holds()`` (whether it holds one) and ``_write(array)``."""

    __slots__ = ()

    def _is_initialized(self) -> bool:
        return self._holds()

    def _get_dims(self) -> list[int]:
        return list(np.shape(self._read()))

    def _set_dims(self, dims) -> None:
        """Resize, as Paddle's ``Resize``: the data stays when the element count does (its
        rows read in the new shape), else the tensor holds zeros of the new shape."""
        dims = [int(d) for d in dims]
        if any(d < 0 for d in dims):
            raise GraphcError(f"_set_dims: dims must be >= 0, got {dims}")
        old = self._read() if self._holds() else np.zeros(0, np.float32)
        if old.size == int(np.prod(dims, dtype=np.int64)):
            self._write(np.array(old).reshape(dims))
        else:
            self._write(np.zeros(dims, old.dtype))

    def _set_layout(self, layout: str) -> None:
        """Paddle records a layout tag for its kernels; graphc's arrays carry none, so a
        known tag is accepted and an unknown one refused (a misspelt layout is a bug)."""
        if layout not in _LAYOUTS:
            raise GraphcError(f"_set_layout: unknown layout {layout!r}; expected one of "
                              f"{', '.join(_LAYOUTS)}")

    def _alloc_float(self, place=None) -> None:
        self._mutable_data(place, "float32")

    def _alloc_double(self, place=None) -> None:
        self._mutable_data(place, "float64")

    def _alloc_int(self, place=None) -> None:
        self._mutable_data(place, "int32")

    def _mutable_data(self, place, dtype) -> None:
        """Storage of ``dtype`` for the current dims (``_set_dims``), as Paddle's
        ``mutable_data``: a value of that dtype stays, another becomes zeros of its shape
        (Paddle's new buffer is uninitialised; zeros are a value of it)."""
        from ..ir.types import normalize_dtype
        want = np.dtype(normalize_dtype(dtype))
        old = self._read() if self._holds() else np.zeros(0, want)
        if np.asarray(old).dtype != want:
            self._write(np.zeros(np.shape(old), want))
        elif not self._holds():
            self._write(old)

    def __str__(self) -> str:
        if not self._holds():
            return "  - uninitialized tensor (no value set)"
        arr = np.asarray(self._read())
        lod = getattr(self, "lod", lambda: [])()
        return (f"  - lod: {lod}\n  - place: {self._place()}\n  - shape: {list(arr.shape)}\n"
                f"  - layout: NCHW\n  - dtype: {arr.dtype}\n  - data: {arr.reshape(-1)}")

    def _numel(self) -> int:
        return int(np.size(self._read()))

    def _element(self, offset: int) -> np.ndarray:
        flat = np.asarray(self._read()).reshape(-1)
        if isinstance(offset, bool) or not isinstance(offset, int | np.integer) or \
                not 0 <= offset < flat.size:
            raise GraphcError(f"element offset {offset!r} is outside the tensor's {flat.size} "
                              "elements")
        return flat

    def _get_float_element(self, offset: int) -> float:
        return float(np.float32(self._element(offset)[offset]))

    def _get_double_element(self, offset: int) -> float:
        return float(self._element(offset)[offset])

    def _set_float_element(self, offset: int, value: float) -> None:
        self._set_element(offset, value)

    def _set_double_element(self, offset: int, value: float) -> None:
        self._set_element(offset, value)

    def _set_element(self, offset: int, value) -> None:
        arr = np.array(self._read())
        self._element(offset)  # checks the offset
        arr.reshape(-1)[offset] = value
        self._write(arr)

    def _place(self):
        from .places import CPUPlace, CUDAPlace
        device = getattr(self, "_device_of", lambda: None)()
        if device is None or device.platform == "cpu":
            return CPUPlace(0 if device is None else device.id)
        return CUDAPlace(device.id)

    def _clear(self) -> None:
        self._write(None)

    def _copy(self, place=None):
        """A host copy (a LoDTensor with this tensor's LoD, if it has one)."""
        from .lod import LoDTensor
        copy = LoDTensor(np.array(self._read()))
        lengths = getattr(self, "recursive_sequence_lengths", lambda: [])()
        if lengths:
            copy.set_recursive_sequence_lengths(lengths)
        return copy

    def __getitem__(self, index):
        return np.asarray(self._read())[index]

    def __len__(self) -> int:
        shape = np.shape(self._read())
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

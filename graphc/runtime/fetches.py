"""What a run returns: fetch-list entries named, and a step's fetched values converted (numpy
arrays, LoDTensors, SelectedRows, tensor arrays' elements), as Paddle's Executor returns them.
"""

from __future__ import annotations

import numpy as np

from ..backends.arrays import TensorArray
from ..backends.jax import from_rows
from ..backends.lod import LoDArray
from ..backends.selected_rows import SelectedRows
from ..ir.errors import GraphcError
from ..ir.program import Variable
from .lod import LoDTensor, LoDTensorArray, unpack, unpack_fetch

__all__ = ["FetchError", "convert_fetches", "fetch_name", "fetched", "writable"]


class FetchError(GraphcError):
    """A fetch target is not computed by the program."""


def fetch_name(item) -> str:
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise FetchError(f"fetch_list entries must be Variables or names, got {type(item).__name__}")


def convert_fetches(values, rows: list, blocks: int, iterations: int, numpy: bool) -> list:
    """A step's fetched values as a run returns them. ``rows``: per fetch, the whole shape of
    a value fetched as a Reduce-mode step's rows (None: whole); ``blocks``: the device blocks
    a LoD value is packed in."""
    if numpy and iterations == 1:  # the common case: dense arrays, read back as numpy
        out = []
        for a, r in zip(values, rows):
            if r is None and type(a) is not LoDArray and not isinstance(
                    a, TensorArray | SelectedRows):
                out.append(writable(a))
            else:
                out.append(_one(a, r, blocks, iterations, numpy))
        return out
    return [_one(a, r, blocks, iterations, numpy) for a, r in zip(values, rows)]


def writable(a) -> np.ndarray:
    """A fetched dense value as a numpy array the caller owns: Paddle copies every fetch out
    of its tensor, and programs edit what they fetch in place (PaddleCV pose's flip_back);
    a device buffer read back is read-only, so it is copied then."""
    arr = np.asarray(a)
    return arr if arr.flags.writeable else arr.copy()


def _one(a, rows, blocks: int, iterations: int, numpy: bool):
    if isinstance(a, LoDArray):
        return unpack_fetch(a, blocks, iterations, numpy)
    return fetched(a if rows is None else from_rows(a, rows), iterations, numpy)


def fetched(value, iterations: int, numpy: bool):
    """A fetched value, as numpy arrays when ``numpy``. A row-sparse one stays a SelectedRows,
    one per iteration when a call ran several (its rows and values came back stacked). A
    tensor array is the list of its written elements, as Paddle's LoDTensorArray."""
    if isinstance(value, TensorArray):
        if iterations > 1:  # stacked per iteration
            return [fetched(TensorArray(value.data[k], value.length[k], value.ranked), 1,
                            numpy) for k in range(iterations)]
        elements = [_array_element(_paddle_element(e) if value.ranked else e, numpy)
                    for e in value.to_list()]
        return elements if numpy else LoDTensorArray(elements)
    if not isinstance(value, SelectedRows):
        # return_numpy=False: a LoDTensor with an empty LoD, as Paddle (read back lazily)
        return writable(value) if numpy else LoDTensor.of_fetch(value)
    if numpy:
        value = value.numpy()
    if iterations > 1:
        return [SelectedRows(value.rows[k], value.values[k], value.height)
                for k in range(iterations)]
    return value


def _paddle_element(e: LoDArray):
    """An element of lod_tensor_to_array's array as Paddle holds it: without graphc's level 0
    (one entry per sequence, 1 while it lasts), so the rows of the sequences that last (a
    level-1 x: dense rows) with x's deeper levels (arr2lod, docs/control_flow.md)."""
    k = int(np.sum(np.asarray(e.lengths[0])))
    if e.lod_level == 1:
        return np.asarray(e.data)[:k]
    return LoDArray(e.data, (np.asarray(e.lengths[1])[:k], *e.lengths[2:]))


def _array_element(e, numpy: bool):
    """An element of a fetched tensor array; a LoD element as a LoDTensor (its tokens when
    ``numpy``), as a fetched LoD value."""
    if isinstance(e, LoDArray):
        t = unpack(e)
        return np.array(t) if numpy else t
    return e if numpy else LoDTensor.of_fetch(e)

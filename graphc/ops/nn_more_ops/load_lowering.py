"""The load op's rule: the file's header is checked when the step is traced, its data read
by a host callback on every run (a file rewritten between runs is read again)."""

from __future__ import annotations

import jax
import numpy as np

from ...backends.lowering import lowering
from .paddle_tensor import PaddleTensorFileError, read_lod_tensor, read_tensor_header


@lowering("load")
def _load(c):
    path = c["file_path"]
    want = c.out_types["Out"][0]
    dtype, dims = read_tensor_header(path)
    if tuple(dims) != tuple(want.shape) or (dtype != c["dtype"] and not c["load_as_fp16"]):
        raise PaddleTensorFileError(f"{c.where}: '{path}' holds {dtype} {dims}, the Variable "
                                    f"loaded into is {c['dtype']} {list(want.shape)}")
    out = np.dtype(want.dtype)

    def read():
        return read_lod_tensor(path)[0].astype(out)

    return {"Out": jax.pure_callback(read, jax.ShapeDtypeStruct(tuple(want.shape), out))}

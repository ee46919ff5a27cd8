"""Lowering of generate_mask_labels: a jax.pure_callback into raster.py (Paddle's kernel is
CPU-only too), outputs in static buffers of the rois' capacity with on-host row counts."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering
from .raster import generate_mask_labels


@lowering("generate_mask_labels")
def _generate_mask_labels(c, ImInfo, GtClasses, IsCrowd, GtSegms, Rois, LabelsInt32):
    cap, n = Rois.capacity, Rois.num_sequences
    width = c["num_classes"] * c["resolution"] ** 2
    shapes = (jax.ShapeDtypeStruct((cap, 4), Rois.dtype),
              jax.ShapeDtypeStruct((cap, 1), jnp.int32),
              jax.ShapeDtypeStruct((cap, width), jnp.int32),
              jax.ShapeDtypeStruct((n,), jnp.int32))
    host = functools.partial(generate_mask_labels, c["num_classes"], c["resolution"])
    rois, has, masks, counts = jax.pure_callback(
        host, shapes, ImInfo, GtClasses.data, GtClasses.lengths[0], IsCrowd.data,
        IsCrowd.lengths[0], GtSegms.data, *GtSegms.lengths, Rois.data, Rois.lengths[0],
        LabelsInt32.data, LabelsInt32.lengths[0])
    lens = (counts,)
    return {"MaskRois": LoDArray(rois, lens), "RoiHasMaskInt32": LoDArray(has, lens),
            "MaskInt32": LoDArray(masks, lens)}

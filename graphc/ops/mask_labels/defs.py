"""generate_mask_labels: Mask R-CNN mask targets per foreground roi, rasterised from the
polygons (a level-3 LoD value: image -> object -> polygon -> points) of its best-matching gt."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import FLOAT_DTYPES, TensorType


def _generate_mask_labels(c: InferContext):
    info, segms, rois = c.x("ImInfo"), c.x("GtSegms"), c.x("Rois")
    c.check(info.lod_level == 0 and info.rank == 2 and info.shape[1] in (3, -1)
            and info.dtype in FLOAT_DTYPES, f"ImInfo must be a float [N, 3], got {info}")
    c.check(segms.lod_level == 3 and segms.rank == 2 and segms.shape[1] in (2, -1)
            and segms.dtype in FLOAT_DTYPES,
            f"GtSegms must be a level-3 LoD value of float points [P, 2] (image -> gt -> "
            f"polygon -> points), got {segms}")
    c.check(rois.lod_level == 1 and rois.rank == 2 and rois.shape[1] in (4, -1)
            and rois.dtype in FLOAT_DTYPES, f"Rois must be a level-1 LoD value [R, 4], got {rois}")
    for slot in ("GtClasses", "IsCrowd", "LabelsInt32"):
        t = c.x(slot)
        c.check(t.lod_level == 1 and t.rank == 2 and t.shape[1] in (1, -1)
                and t.dtype == "int32", f"{slot} must be a level-1 LoD value of int32 "
                f"[rows, 1], got {t}")
    c.check(c["num_classes"] > 0, f"num_classes must be positive, got {c['num_classes']}")
    c.check(c["resolution"] > 0, f"resolution must be positive, got {c['resolution']}")
    width = c["num_classes"] * c["resolution"] ** 2
    return {"MaskRois": TensorType((-1, 4), rois.dtype, False, 1),
            "RoiHasMaskInt32": TensorType((-1, 1), "int32", False, 1),
            "MaskInt32": TensorType((-1, width), "int32", False, 1)}


register("generate_mask_labels", "ImInfo GtClasses IsCrowd GtSegms Rois LabelsInt32",
         "MaskRois RoiHasMaskInt32 MaskInt32", {"num_classes": "int", "resolution": "int"},
         infer=_generate_mask_labels, traits=(NO_GRAD,),
         lod_inputs=("GtClasses", "IsCrowd", "GtSegms", "Rois", "LabelsInt32"), lod="aware",
         max_lod_level=3,
         doc="per image: the fg rois (labels > 0; else its first bg roi), their local index "
             "and num_classes * resolution^2 mask targets (-1 outside the roi's class slot), "
             "the polygons of the best-IoU gt rasterised in the roi's box; LoD values bounded "
             "by the rois' rows")

"""Mask R-CNN mask targets (Paddle 1.8's ``fluid.layers.generate_mask_labels``), from polygon
ground truth fed as a level-3 LoD value (image -> object -> polygon -> points)."""

from __future__ import annotations

from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable


def generate_mask_labels(im_info, gt_classes, is_crowd, gt_segms, rois, labels_int32,
                         num_classes, resolution):
    """(mask_rois [K, 4], roi_has_mask_int32 [K, 1], mask_int32 [K, num_classes *
    resolution^2]), LoD by image: for each foreground roi (labels_int32 > 0; an image without
    one gives its first roi, all -1) the polygons of the non-crowd gt whose box overlaps it
    most, rasterised in the roi's box at resolution x resolution, in the roi's class slot
    (-1 elsewhere). ``gt_segms``: lod_level=3 float points [P, 2]. Runs on the host; K is
    at most the rois' rows. No gradient."""
    layer = "generate_mask_labels"
    for arg, v in (("im_info", im_info), ("gt_classes", gt_classes), ("is_crowd", is_crowd),
                   ("gt_segms", gt_segms), ("rois", rois), ("labels_int32", labels_int32)):
        check_variable(layer, arg, v)
    for arg, v in (("num_classes", num_classes), ("resolution", resolution)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ProgramError(f"{layer}: {arg} must be a positive int, got {v!r}")
    helper = LayerHelper(layer)
    mask_rois = helper.create_variable_for_type_inference(rois.dtype, stop_gradient=True)
    has_mask = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    mask = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op(layer, {"ImInfo": im_info, "GtClasses": gt_classes, "IsCrowd": is_crowd,
                             "GtSegms": gt_segms, "Rois": rois, "LabelsInt32": labels_int32},
                     {"MaskRois": mask_rois, "RoiHasMaskInt32": has_mask, "MaskInt32": mask},
                     {"num_classes": num_classes, "resolution": resolution})
    return mask_rois, has_mask, mask

"""Detection ops with data-dependent output sizes beyond multiclass_nms: NMS variants, RPN
proposals and the FPN level routing (static bounds plus LoD row counts computed on device)."""

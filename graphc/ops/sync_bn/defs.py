"""sync_batch_norm and its gradient: batch_norm whose batch statistics cover every data-parallel
replica's slice of the batch (the sync-batch-norm pass creates them from training batch_norm).

Slots, attributes and types are batch_norm's, plus ``nranks`` (the replica count the graph was
built for, checked by the backend as the collectives' is). Gradient convention, as for every
data-parallel gradient: each replica's ``Y@GRAD`` is the gradient of its own (local-mean) loss;
``X@GRAD`` is then the gradient through the global statistics, and ``Scale@GRAD``/``Bias@GRAD``
are this replica's share (sums over its own samples), which the data-parallel all-reduce adds up.
"""

from __future__ import annotations

from ...ir.grad_defs import GRAD_SUFFIX, default_grad_maker
from ...ir.opdef import COLLECTIVE, STATEFUL, get_op_def, register

_BN = get_op_def("batch_norm")
_ATTRS = {name: (a.type, a.default) for name, a in _BN.attrs.items()}
_ATTRS["nranks"] = ("int", 1)


def _sync_batch_norm(c):
    c.check(c["nranks"] >= 1, f"nranks must be >= 1, got {c['nranks']}")
    return _BN.infer(c)


register("sync_batch_norm", "X Scale Bias Mean Variance",
         "Y MeanOut VarianceOut SavedMean SavedVariance", _ATTRS,
         infer=_sync_batch_norm, traits=(STATEFUL, COLLECTIVE),
         inplace={"MeanOut": "Mean", "VarianceOut": "Variance"},
         doc="batch_norm with batch mean and variance over every replica's samples")



def _sync_batch_norm_grad(c):
    c.check(c["nranks"] >= 1, f"nranks must be >= 1, got {c['nranks']}")
    frozen = c["is_test"] or c["use_global_stats"]
    c.check(frozen or (c.has("SavedMean") and c.has("SavedVariance")),
            "SavedMean and SavedVariance (the global statistics) are required in training")
    c.check(c.has("Y" + GRAD_SUFFIX), "Y@GRAD is required")
    return {s + GRAD_SUFFIX: c.x(s) for s in ("X", "Scale", "Bias")}


# Registered here rather than derived (as batch_norm_grad is) so that it carries the collective
# trait: it exchanges gradient sums. Its slots are the derived batch_norm_grad's, so the pass
# turns one into the other by type and nranks alone.
_FWD_SLOTS = [s.name for s in _BN.inputs] + [s.name for s in _BN.outputs]
register("sync_batch_norm_grad",
         " ".join(f"{s}?" for s in _FWD_SLOTS + [s.name + GRAD_SUFFIX for s in _BN.outputs]),
         " ".join(f"{s.name}{GRAD_SUFFIX}?" for s in _BN.inputs), _ATTRS,
         infer=_sync_batch_norm_grad, traits=(COLLECTIVE,),
         doc="gradient of sync_batch_norm: X@GRAD through the global statistics, "
             "Scale@GRAD and Bias@GRAD this replica's share")

# The grad op reads what batch_norm_grad reads (the saved global statistics among them), so
# the pass can turn a batch_norm_grad into a sync_batch_norm_grad by its type and nranks alone.
_make_bn_grad = default_grad_maker("batch_norm")


def _grad_maker(inputs, outputs, attrs, out_grads, in_grads):
    return [("sync_batch_norm_grad", ins, outs, a)
            for _, ins, outs, a in _make_bn_grad(inputs, outputs, attrs, out_grads, in_grads)]


_grad_maker.trusted = True
get_op_def("sync_batch_norm").grad_maker = _grad_maker

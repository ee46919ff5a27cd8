"""Weight decay as ops: L2Decay(c) adds c * param, L1Decay(c) c * sign(param), to the
gradient before the update.

Paddle 1.8's semantics: a ParamAttr's regularizer overrides the optimizer's; decay is not
scaled by the learning rate; ops carry the optimize role. A row-sparse gradient (an is_sparse
embedding's) plus the dense decay is a dense ``<grad>@NEWGRAD@``: every row decays, as in
Paddle 1.8's ``append_regularization_ops`` (docs/sparse.md).
"""

from __future__ import annotations

# the dense gradient a row-sparse one becomes once decayed (Paddle's kNewGradSuffix)
NEW_GRAD_SUFFIX = "@NEWGRAD@"


def _decayed(block, param, grad, decay):
    """``sum(grad, decay)``: into ``grad`` itself when dense; a row-sparse gradient plus the
    dense decay is dense, a new variable (Paddle 1.8: every row of the table decays)."""
    out = grad
    if grad.selected_rows:
        out = block.create_var(grad.name + NEW_GRAD_SUFFIX, param.shape, param.dtype)
    block.append_op("sum", {"X": [grad, decay]}, {"Out": out})
    return out


class L2Decay:
    def __init__(self, regularization_coeff: float = 0.0):
        self.coeff = float(regularization_coeff)

    def append(self, block, param, grad):
        """grad + coeff * param, written back into the gradient variable (as Paddle does;
        a row-sparse gradient into a new dense one, ``_decayed``)."""
        decay = block.create_var(f"{param.name}@DECAY", param.shape, param.dtype)
        block.append_op("scale", {"X": param}, {"Out": decay}, {"scale": self.coeff})
        return _decayed(block, param, grad, decay)

    def __repr__(self) -> str:
        return f"L2Decay({self.coeff})"


class L1Decay:
    """grad + coeff * sign(param) (Paddle's L1DecayRegularizer: a sign op and a scale)."""

    def __init__(self, regularization_coeff: float = 0.0):
        self.coeff = float(regularization_coeff)

    def append(self, block, param, grad):
        sign = block.create_var(f"{param.name}@L1SIGN", param.shape, param.dtype)
        decay = block.create_var(f"{param.name}@DECAY", param.shape, param.dtype)
        block.append_op("sign", {"X": param}, {"Out": sign})
        block.append_op("scale", {"X": sign}, {"Out": decay}, {"scale": self.coeff})
        return _decayed(block, param, grad, decay)

    def __repr__(self) -> str:
        return f"L1Decay({self.coeff})"


L2DecayRegularizer, L1DecayRegularizer = L2Decay, L1Decay


def append_regularization_ops(parameters_and_grads, regularization=None):
    """Paddle's ``append_regularization_ops``: each gradient plus its parameter's decay (the
    parameter's own regularizer, else ``regularization``), as optimize-role ops; returns
    the [(parameter, gradient)] pairs to update with. A None gradient, or a parameter with
    no regularizer, passes unchanged."""
    out = []
    for param, grad in parameters_and_grads:
        reg = param.regularizer if param.regularizer is not None else regularization
        if grad is None or reg is None:
            out.append((param, grad))
            continue
        with grad.block.program.op_role_guard("optimize"):
            out.append((param, reg.append(grad.block, param, grad)))
    return out

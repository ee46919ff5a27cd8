"""``fluid.metrics``: Python-side metric accumulators (Accuracy, Auc, Precision, Recall, ...)
that users update with fetched values between steps, as in Paddle 1.8."""

from __future__ import annotations

import copy
import numbers

import numpy as np

from ..ir.errors import GraphcError


class MetricError(GraphcError, ValueError):
    """A metric was given something it cannot count, or asked for a value before any data
    (a ValueError too, as Paddle raises)."""


def _array(metric, arg: str, value) -> np.ndarray:
    if not isinstance(value, np.ndarray | np.generic):
        raise MetricError(f"{type(metric).__name__}.update: '{arg}' must be a numpy ndarray "
                          f"(a fetched value), got {type(value).__name__}")
    return np.asarray(value)


class MetricBase:
    """Base of the accumulators: public attributes are the state, which ``reset`` zeroes and
    ``get_config`` reports; ``update`` adds a batch, ``eval`` gives the metric so far."""

    def __init__(self, name=None):
        self._name = str(name) if name is not None else type(self).__name__

    def __str__(self) -> str:
        return self._name

    def _states(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def reset(self) -> None:
        for attr, value in self._states().items():
            if isinstance(value, bool):
                setattr(self, attr, False)
            elif isinstance(value, int):
                setattr(self, attr, 0)
            elif isinstance(value, float):
                setattr(self, attr, 0.0)
            elif isinstance(value, np.ndarray | np.generic):
                setattr(self, attr, np.zeros_like(value))
            else:
                setattr(self, attr, None)

    def get_config(self) -> dict:
        return {"name": self._name, "states": copy.deepcopy(self._states())}

    def update(self, preds, labels):
        raise NotImplementedError(f"{type(self).__name__} does not implement update")

    def eval(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement eval")


class CompositeMetric(MetricBase):
    """Several metrics updated with the same (preds, labels); eval returns each one's value."""

    def __init__(self, name=None):
        super().__init__(name)
        self._metrics: list[MetricBase] = []

    def add_metric(self, metric) -> None:
        if not isinstance(metric, MetricBase):
            raise MetricError(f"CompositeMetric.add_metric: expected a MetricBase, got "
                              f"{type(metric).__name__}")
        self._metrics.append(metric)

    def reset(self) -> None:
        for m in self._metrics:
            m.reset()

    def update(self, preds, labels) -> None:
        for m in self._metrics:
            m.update(preds, labels)

    def eval(self) -> list:
        return [m.eval() for m in self._metrics]


def _binary(metric, preds, labels):
    preds = np.rint(_array(metric, "preds", preds)).astype("int64").reshape(-1)
    labels = _array(metric, "labels", labels).astype("int64").reshape(-1)
    if preds.shape != labels.shape:
        raise MetricError(f"{type(metric).__name__}.update: {preds.size} predictions for "
                          f"{labels.size} labels")
    return preds, labels


class Precision(MetricBase):
    """tp / (tp + fp) of binary predictions (rounded to 0/1); 0 before any positive one."""

    def __init__(self, name=None):
        super().__init__(name)
        self.tp, self.fp = 0, 0

    def update(self, preds, labels) -> None:
        preds, labels = _binary(self, preds, labels)
        predicted = preds == 1
        self.tp += int(np.sum(predicted & (labels == 1)))
        self.fp += int(np.sum(predicted & (labels != 1)))

    def eval(self) -> float:
        ap = self.tp + self.fp
        return float(self.tp) / ap if ap != 0 else 0.0


class Recall(MetricBase):
    """tp / (tp + fn) of binary predictions (rounded to 0/1); 0 before any positive label."""

    def __init__(self, name=None):
        super().__init__(name)
        self.tp, self.fn = 0, 0

    def update(self, preds, labels) -> None:
        preds, labels = _binary(self, preds, labels)
        actual = labels == 1
        self.tp += int(np.sum(actual & (preds == 1)))
        self.fn += int(np.sum(actual & (preds != 1)))

    def eval(self) -> float:
        recall = self.tp + self.fn
        return float(self.tp) / recall if recall != 0 else 0.0


class Accuracy(MetricBase):
    """The weighted mean of per-batch accuracies: update(value=layers.accuracy's output,
    weight=the batch size)."""

    def __init__(self, name=None):
        super().__init__(name)
        self.value, self.weight = 0.0, 0.0

    def update(self, value, weight) -> None:
        if not isinstance(value, numbers.Number | np.ndarray | np.generic):
            raise MetricError(f"Accuracy.update: 'value' must be a number or numpy array, got "
                              f"{type(value).__name__}")
        if not isinstance(weight, numbers.Number | np.generic) or isinstance(weight, bool) \
                or weight < 0:
            raise MetricError(f"Accuracy.update: 'weight' must be a number >= 0, got "
                              f"{weight!r}")
        self.value += float(np.sum(value)) * float(weight)
        self.weight += float(weight)

    def eval(self) -> float:
        if self.weight == 0:
            raise MetricError("There is no data in Accuracy: update it with the fetched "
                              "layers.accuracy output and the batch size first")
        return self.value / self.weight


class ChunkEvaluator(MetricBase):
    """Precision, recall and F1 of chunks from counts a chunk_eval op fetched each batch."""

    def __init__(self, name=None):
        super().__init__(name)
        self.num_infer_chunks = self.num_label_chunks = self.num_correct_chunks = 0

    def update(self, num_infer_chunks, num_label_chunks, num_correct_chunks) -> None:
        for arg, v in (("num_infer_chunks", num_infer_chunks),
                       ("num_label_chunks", num_label_chunks),
                       ("num_correct_chunks", num_correct_chunks)):
            if not isinstance(v, numbers.Number | np.ndarray | np.generic):
                raise MetricError(f"ChunkEvaluator.update: '{arg}' must be a number or numpy "
                                  f"array, got {type(v).__name__}")
        self.num_infer_chunks += int(np.sum(num_infer_chunks))
        self.num_label_chunks += int(np.sum(num_label_chunks))
        self.num_correct_chunks += int(np.sum(num_correct_chunks))

    def eval(self):
        correct = float(self.num_correct_chunks)
        precision = correct / self.num_infer_chunks if self.num_infer_chunks else 0.0
        recall = correct / self.num_label_chunks if self.num_label_chunks else 0.0
        f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
        return precision, recall, f1


class EditDistance(MetricBase):
    """Mean edit distance and the fraction of sequences with any error, from the distances
    an edit_distance op fetched each batch."""

    def __init__(self, name=None):
        super().__init__(name)
        self.total_distance, self.seq_num, self.instance_error = 0.0, 0, 0

    def update(self, distances, seq_num) -> None:
        distances = _array(self, "distances", distances)
        seq_num = int(np.sum(seq_num))
        self.total_distance += float(np.sum(distances))
        self.seq_num += seq_num
        self.instance_error += seq_num - int(np.sum(distances == 0))

    def eval(self):
        if self.seq_num == 0:
            raise MetricError("There is no data in EditDistance: update it with the fetched "
                              "distances and sequence count first")
        return self.total_distance / self.seq_num, self.instance_error / float(self.seq_num)


class Auc(MetricBase):
    """ROC AUC over every batch so far, from predictions [N, 2] (column 1: the positive
    probability) binned into num_thresholds + 1 buckets, as layers.auc computes it."""

    def __init__(self, name=None, curve: str = "ROC", num_thresholds: int = 4095):
        super().__init__(name)
        if curve not in ("ROC", "PR"):
            raise MetricError(f"Auc: curve must be 'ROC' or 'PR', got {curve!r}")
        self._curve, self._num_thresholds = curve, int(num_thresholds)
        self._stat_pos = np.zeros(self._num_thresholds + 1, np.int64)
        self._stat_neg = np.zeros(self._num_thresholds + 1, np.int64)

    def reset(self) -> None:
        self._stat_pos[:] = 0
        self._stat_neg[:] = 0

    def update(self, preds, labels) -> None:
        preds = _array(self, "preds", preds)
        labels = _array(self, "labels", labels).reshape(-1)
        if preds.ndim != 2 or preds.shape[0] != labels.shape[0]:
            raise MetricError(f"Auc.update: preds must be [N, 2] for {labels.shape[0]} labels, "
                              f"got {list(preds.shape)}")
        score = preds[:, -1]
        if np.any((score < 0) | (score > 1)):
            raise MetricError("Auc.update: the positive-class probabilities must lie in [0, 1]")
        index = (score * np.asarray(self._num_thresholds, score.dtype)).astype(np.int64)
        positive = labels != 0
        np.add.at(self._stat_pos, index[positive], 1)
        np.add.at(self._stat_neg, index[~positive], 1)

    @staticmethod
    def trapezoid_area(x1, x2, y1, y2) -> float:
        """The area under the segment (x1, y1)-(x2, y2): |x1 - x2| * (y1 + y2) / 2."""
        return abs(x1 - x2) * (y1 + y2) / 2.0

    def eval(self) -> float:
        pos = self._stat_pos[::-1].astype(np.float64)
        neg = self._stat_neg[::-1].astype(np.float64)
        tot_pos, tot_neg = np.cumsum(pos), np.cumsum(neg)
        area = float(np.sum(neg * (2 * tot_pos - pos)) / 2)
        if tot_pos[-1] > 0 and tot_neg[-1] > 0:
            return area / tot_pos[-1] / tot_neg[-1]
        return 0.0


class DetectionMAP:
    """mAP of detections (``input``: multiclass_nms's LoD rows [label, score, box]) against
    the ground truth ``gt_label``/``gt_box`` (/``gt_difficult``), built into the default
    program as in Paddle 1.8: two detection_map ops, one over the batch and one adding the
    batch to persistable state that accumulates until ``reset``. Fetch ``get_map_var()``'s
    two values. ``capacity`` (graphc's, keyword only): the most detection records the state
    holds (default 262144; each step costs O(capacity)); once they fill it the accumulated
    mAP is NaN until ``reset``."""

    def __init__(self, input, gt_label, gt_box, gt_difficult=None, class_num=None,
                 background_label=0, overlap_threshold=0.5, evaluate_difficult=True,
                 ap_version="integral", *, capacity=None):
        from .. import layers
        from ..layers.detection_eval import detection_map, map_state, map_states
        from ..layers.helper import LayerHelper
        from ..ops.detection_eval.defs import DEFAULT_CAPACITY

        if class_num is None:
            raise MetricError("DetectionMAP: class_num is required (the number of classes, "
                              "background included)")
        capacity = DEFAULT_CAPACITY if capacity is None else capacity
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise MetricError(f"DetectionMAP: capacity must be a positive int, got "
                              f"{capacity!r}")
        helper = LayerHelper("map_eval")
        gt_label = layers.cast(gt_label, gt_box.dtype)
        if gt_difficult is not None:
            gt_difficult = layers.cast(gt_difficult, gt_box.dtype)
            label = layers.concat([gt_label, gt_difficult, gt_box], axis=1)
        else:
            label = layers.concat([gt_label, gt_box], axis=1)
        kwargs = {"overlap_threshold": overlap_threshold,
                  "evaluate_difficult": evaluate_difficult, "ap_version": ap_version,
                  "capacity": capacity}
        # the batch's mAP, then the accumulated one (background_label unused, as Paddle's)
        self.cur_map = detection_map(input, label, class_num, background_label, **kwargs)
        states = map_states(helper, class_num, gt_box.dtype, capacity)
        self.has_state = map_state(helper, "has_state", [1], "int32", 0)
        self.accum_map = detection_map(input, label, class_num, background_label,
                                       has_state=self.has_state, input_states=states,
                                       out_states=states, **kwargs)
        layers.fill_constant(shape=self.has_state.shape, value=1, dtype="int32",
                             out=self.has_state)

    def get_map_var(self):
        """(the batch's mAP, the mAP accumulated since the start or the last reset)."""
        return self.cur_map, self.accum_map

    def reset(self, executor, reset_program=None):
        """Forget the accumulated records: runs a program setting has_state to 0."""
        from .. import layers
        from ..ir.default_programs import program_guard
        from ..ir.program import Program

        if reset_program is None:
            reset_program = Program()
        with program_guard(main_program=reset_program):
            var = reset_program.current_block().create_var(
                self.has_state.name, list(self.has_state.shape), self.has_state.dtype,
                persistable=True)
            layers.fill_constant(shape=var.shape, value=0, dtype=var.dtype, out=var)
        executor.run(reset_program)


__all__ = ["Accuracy", "Auc", "ChunkEvaluator", "CompositeMetric", "DetectionMAP",
           "EditDistance", "MetricBase", "MetricError", "Precision", "Recall"]

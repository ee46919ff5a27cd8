"""``fluid.metrics``: Python-side metric accumulators (Accuracy, Auc, Precision, Recall, ...)
that users update with fetched values between steps, as in Paddle 1.8."""

"""``fluid.data_feed_desc``: ``DataFeedDesc``, a data feed description read from Paddle's
prototxt (graphc.dataio.data_feed_desc holds it)."""

from ..dataio.data_feed_desc import DataFeedDesc

__all__ = ["DataFeedDesc"]

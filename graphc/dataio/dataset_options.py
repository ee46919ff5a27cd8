"""The Dataset settings Paddle 1.8 has for its C++ data feed and PSLib/BoxPS training, and
how each maps onto graphc's one-process reader: honoured, recorded, or refused by name."""

from __future__ import annotations

import threading

import numpy as np

from .multislot import DatasetError

__all__ = ["BaseOptions", "InMemoryOptions", "check_int"]

_FEED_TYPES = ("MultiSlotInMemoryDataFeed", "MultiSlotDataFeed")


def check_int(what: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise DatasetError(f"{what} must be an int of at least {low}, got {value!r}")
    return value


class BaseOptions:
    """DatasetBase's Paddle settings beyond the reader: ``set_download_cmd`` is honoured (each
    file is ``download_cmd file``'s output, then piped); HDFS settings, rank offset, pv batch
    size, input type and feature evaluation are recorded."""

    def _init_base_options(self) -> None:
        self.download_cmd = ""
        self.hdfs_config = None
        self.rank_offset = ""
        self.pv_batch_size = 32
        self.input_type = 0
        self.fea_eval = False
        self.record_candidate_size = 10000

    def set_download_cmd(self, download_cmd):
        """A shell command that prints a file given its name (``hadoop fs -cat``, ...)."""
        if not isinstance(download_cmd, str):
            raise DatasetError(f"download_cmd must be a shell command string, got "
                               f"{type(download_cmd).__name__}")
        self.download_cmd = download_cmd.strip()

    def set_hdfs_config(self, fs_name, fs_ugi):
        """Recorded; graphc reads HDFS files only through ``set_download_cmd``."""
        self.hdfs_config = (fs_name, fs_ugi)

    def set_rank_offset(self, rank_offset):
        self.rank_offset = rank_offset

    def set_pv_batch_size(self, pv_batch_size):
        self.pv_batch_size = check_int("pv_batch_size", pv_batch_size)

    def set_input_type(self, input_type):
        self.input_type = input_type

    def set_fea_eval(self, record_candidate_size, fea_eval=True):
        """Feature evaluation: ``slots_shuffle`` then permutes slots across instances."""
        self.record_candidate_size = check_int("record_candidate_size", record_candidate_size)
        self.fea_eval = bool(fea_eval)


class InMemoryOptions:
    """InMemoryDataset's extra settings. Line prefixes (``set_parse_ins_id``,
    ``set_parse_content``, ``set_parse_logkey``) are honoured: each makes every line start
    with a ``1 <token>`` field, skipped when the slots are read, as Paddle's feed reads them.
    Queue, fleet-send and phase settings are recorded (one process has no channels to send
    between); merging instances by line id / search id and PSLib's feasign tables are
    refused."""

    def _init_options(self) -> None:
        self.queue_num = None
        self.parse_ins_id = False
        self.parse_content = False
        self.parse_logkey = False
        self.merge_by_sid = True
        self.enable_pv_merge = False
        self.current_phase = 1
        self.fleet_send_batch_size = 1024
        self.fleet_send_sleep_seconds = 0
        self.feed_type = "MultiSlotInMemoryDataFeed"
        self._preload: threading.Thread | None = None
        self._preload_error: BaseException | None = None

    def _line_prefix(self) -> int:
        return int(self.parse_ins_id) + int(self.parse_content) + int(self.parse_logkey)

    def set_queue_num(self, queue_num):
        """Paddle's number of shuffle channels; graphc's loaded data is one array per slot."""
        self.queue_num = check_int("queue_num", queue_num)

    def set_parse_ins_id(self, parse_ins_id):
        """Each line starts with ``1 <instance id>`` (skipped when read)."""
        self.parse_ins_id = bool(parse_ins_id)

    def set_parse_content(self, parse_content):
        """Each line has ``1 <content>`` before the slots (after the instance id)."""
        self.parse_content = bool(parse_content)

    def set_parse_logkey(self, parse_logkey):
        """Each line has ``1 <log key>`` before the slots (after id and content)."""
        self.parse_logkey = bool(parse_logkey)

    def set_merge_by_sid(self, merge_by_sid):
        self.merge_by_sid = bool(merge_by_sid)

    def set_enable_pv_merge(self, enable_pv_merge):
        self.enable_pv_merge = bool(enable_pv_merge)

    def preprocess_instance(self):
        """Without pv merge (graphc has none) there is nothing to group: a no-op."""
        self._require_no_pv("preprocess_instance")

    def postprocess_instance(self):
        self._require_no_pv("postprocess_instance")

    def set_current_phase(self, current_phase):
        """1 (train) or 0 (join), recorded."""
        if current_phase not in (0, 1):
            raise DatasetError(f"current_phase must be 1 (train) or 0 (join), got "
                               f"{current_phase!r}")
        self.current_phase = current_phase

    def get_pv_data_size(self):
        """Without pv merge every instance is its own page view."""
        return self.get_memory_data_size()

    def _require_no_pv(self, what: str) -> None:
        if self.enable_pv_merge:
            raise DatasetError(f"{what}: graphc does not merge instances into page views "
                               "(set_enable_pv_merge(True) is BoxPS training, which graphc "
                               "lacks); leave pv merge off")

    def set_fleet_send_batch_size(self, fleet_send_batch_size=1024):
        """Recorded: global_shuffle in one process sends nothing."""
        self.fleet_send_batch_size = check_int("fleet_send_batch_size", fleet_send_batch_size)

    def set_fleet_send_sleep_seconds(self, fleet_send_sleep_seconds=0):
        self.fleet_send_sleep_seconds = check_int("fleet_send_sleep_seconds",
                                                  fleet_send_sleep_seconds, low=0)

    def set_merge_by_lineid(self, var_list, erase_duplicate_feas=True, min_merge_size=2,
                            keep_unmerged_ins=True):
        raise DatasetError("set_merge_by_lineid: graphc does not merge instances that share a "
                           "line id; join the sources before writing the data files")

    def set_generate_unique_feasigns(self, generate_uni_feasigns, shard_num):
        raise DatasetError("set_generate_unique_feasigns is PSLib's sparse-table "
                           "preparation, which graphc lacks; graphc's parameter server "
                           "(fleet, docs/distributed.md) needs no feasign tables")

    def generate_local_tables_unlock(self, table_id, fea_dim, read_thread_num,
                                     consume_thread_num, shard_num):
        raise DatasetError("generate_local_tables_unlock is PSLib's sparse-table "
                           "preparation, which graphc lacks")

    def set_feed_type(self, data_feed_type):
        """graphc reads the MultiSlot text format only."""
        if data_feed_type not in _FEED_TYPES:
            raise DatasetError(f"data feed {data_feed_type!r}: graphc reads the MultiSlot "
                               f"format ({' or '.join(_FEED_TYPES)})")
        self.feed_type = data_feed_type

    def slots_shuffle(self, slots):
        """With ``set_fea_eval``: the loaded values of these slots (names) are permuted across
        instances (the other slots stay), to measure the slots' importance; without it, as
        in Paddle, nothing happens. The permutation is ``default_rng(0)``'s."""
        if not self.fea_eval:
            return
        self._require_loaded()
        names = [v.name for v in self.use_vars]
        unknown = sorted(set(slots) - set(names))
        if unknown:
            raise DatasetError(f"slots_shuffle: no slot named {unknown} (the slots are {names})")
        perm = np.random.default_rng(0).permutation(len(self._data[0]))
        for k, name in enumerate(names):
            if name in slots:
                self._data[k] = self._data[k][perm]

    def preload_into_memory(self, thread_num=None):
        """``load_into_memory`` in a background thread; ``wait_preload_done`` joins it (and
        raises what the load raised)."""
        if self._preload is not None:
            raise DatasetError("preload_into_memory: a preload is already running; call "
                               "wait_preload_done() first")
        self._check_ready()
        if thread_num is not None:
            self.set_thread(thread_num)
        self._preload_error = None

        def run():
            try:
                self.load_into_memory()
            except BaseException as exc:  # handed to wait_preload_done
                self._preload_error = exc

        self._preload = threading.Thread(target=run, name="graphc-InMemoryDataset-preload",
                                         daemon=True)
        self._preload.start()

    def wait_preload_done(self):
        if self._preload is None:
            raise DatasetError("wait_preload_done: no preload_into_memory() is running")
        self._preload.join()
        self._preload = None
        error, self._preload_error = self._preload_error, None
        if error is not None:
            raise error

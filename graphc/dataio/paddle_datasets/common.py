"""``paddle.dataset.common``: the cache folder (``DATA_HOME``), an md5-checked ``download`` that
only finds files already there, ``md5file``, ``split``, ``cluster_files_reader``, safe pickles."""

from __future__ import annotations

import contextlib
import glob
import gzip
import hashlib
import os
import pickle
import sys
import tarfile
import tempfile
import zipfile
import zlib

from ..multislot import DatasetError

# graphc never downloads: ``download`` returns the cached file's path or raises one
# DatasetFileError saying which file to put where. ``DATA_HOME`` follows ``~`` at each call unless
# a script assigns it, as Paddle's readers look it up at each call too.
# ``GRAPHC_DATASET_CHECK_MD5=0`` accepts a file of your own in Paddle's format. Pickles go
# through a restricted unpickler that builds numpy arrays and plain Python data only.
__all__ = ["DatasetFileError", "cluster_files_reader", "convert", "download",
           "md5file", "split"]


class DatasetFileError(DatasetError):
    """A Paddle dataset file is missing from the cache, has another md5, or is not in the
    format Paddle's reader expects; the message names the file."""


def _default_home() -> str:
    return os.path.expanduser(os.path.join("~", ".cache", "paddle", "dataset"))


def __getattr__(name: str):
    # DATA_HOME follows HOME until a script assigns the attribute (then that value wins,
    # as in Paddle, where readers look the module attribute up at each call)
    if name == "DATA_HOME":
        return _default_home()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def data_home() -> str:
    """The cache folder now: ``DATA_HOME`` if a script set it, else ``~/.cache/paddle/dataset``."""
    return vars(sys.modules[__name__]).get("DATA_HOME") or _default_home()


def md5file(fname: str) -> str:
    """The hex md5 of a file's bytes."""
    digest = hashlib.md5()
    with _reading(fname):
        with open(fname, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _check_md5() -> bool:
    return os.environ.get("GRAPHC_DATASET_CHECK_MD5", "1").strip().lower() not in (
        "0", "false", "no", "off")


def download(url: str, module_name: str, md5sum: str, save_name: str | None = None) -> str:
    """The path of ``DATA_HOME/module_name/<file name of url or save_name>`` when that file
    is there with md5 ``md5sum``; else DatasetFileError saying where to put which file."""
    name = url.split("/")[-1] if save_name is None else save_name
    path = os.path.join(data_home(), module_name, name)
    where = f"paddle.dataset.{module_name}"
    if not os.path.isfile(path):
        raise DatasetFileError(
            f"{where}: {path} is not there and graphc never downloads. Put the file there "
            f"(fetch {url}, md5 {md5sum}, or copy {module_name}/{name} from the Paddle cache "
            "(~/.cache/paddle/dataset) of a machine where Paddle fetched it); "
            "paddle.dataset.common.DATA_HOME names another cache folder")
    if _check_md5():
        got = md5file(path)
        if got != md5sum:
            raise DatasetFileError(
                f"{where}: {path} has md5 {got}, Paddle's file ({url}) has {md5sum}: replace "
                "it with Paddle's file, or set GRAPHC_DATASET_CHECK_MD5=0 to read a file of "
                "your own in the same format")
    return path


# -- reading files: every format error becomes a DatasetFileError naming the file -----------

_FORMAT_ERRORS = (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, zlib.error,
                  gzip.BadGzipFile, UnicodeDecodeError, ValueError, KeyError, IndexError,
                  TypeError, pickle.UnpicklingError, AttributeError)


@contextlib.contextmanager
def _reading(path: str, what: str = "the file"):
    try:
        yield
    except DatasetError:
        raise
    except FileNotFoundError as exc:
        raise DatasetFileError(f"{path}: {what} is not there ({exc.strerror})") from None
    except _FORMAT_ERRORS as exc:
        raise DatasetFileError(f"{path}: {what} is not in the expected format "
                               f"({type(exc).__name__}: {exc})") from None


def reading(path: str, what: str = "the file"):
    """Context manager: errors met while reading ``path`` become DatasetFileError."""
    return _reading(path, what)


def open_tar(path: str) -> tarfile.TarFile:
    with _reading(path, "the tar archive"):
        return tarfile.open(path, mode="r")


def tar_member(tar: tarfile.TarFile, member, path: str):
    """A member's (name or TarInfo) file object; a missing member names the archive and the
    member. Pass the TarInfo while iterating with ``tar.next()``: a name makes tarfile read
    the whole index, which ends that iteration."""
    try:
        f = tar.extractfile(member)
    except KeyError:
        f = None
    if f is None:
        name = getattr(member, "name", member)
        raise DatasetFileError(f"{path}: the archive has no file {name!r}")
    return f


# -- a restricted unpickler: a pickle can run code, so only data types are built -------------

_ALLOWED_GLOBALS = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),  # how protocol 2 spells bytes
    ("collections", "OrderedDict"),
    *((mod, n) for mod in ("builtins", "__builtin__")
      for n in ("list", "dict", "tuple", "set", "frozenset", "bytes", "bytearray", "str",
                "int", "float", "complex", "bool", "unicode", "long")),
})


class _DataUnpickler(pickle.Unpickler):
    def __init__(self, file, path: str, **kwargs):
        super().__init__(file, **kwargs)
        self._path = path

    def find_class(self, module, name):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise DatasetFileError(
            f"{self._path}: the pickle asks for {module}.{name}; graphc's restricted unpickler "
            "builds only numpy arrays and plain Python data (a pickle can run code), so the "
            "file is refused")

    def persistent_load(self, pid):
        raise DatasetFileError(f"{self._path}: the pickle holds a persistent id; refused")


def load_pickle(file, path: str, encoding: str = "ASCII"):
    """Unpickle ``file`` (a binary file object) allowing data types only; ``path`` names it
    in errors."""
    with _reading(path, "the pickle"):
        return _DataUnpickler(file, path, encoding=encoding).load()


def safe_pickle_load(f):
    """``cluster_files_reader``'s default loader: a restricted ``pickle.load``."""
    return load_pickle(f, getattr(f, "name", "<pickle>"))


def _write_atomic(path: str, write) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def split(reader, line_count, suffix="%05d.pickle", dumper=pickle.dump):
    """Write the samples of ``reader()`` into files ``suffix % i`` with ``dumper(list, f)``,
    cutting where Paddle 1.8 does (the first file holds ``line_count + 1`` samples, the
    others ``line_count``); each file is written whole or not at all."""
    if not callable(reader):
        raise TypeError("reader should be callable.")
    lines, index = [], 0
    for i, d in enumerate(reader()):
        lines.append(d)
        if i >= line_count and i % line_count == 0:
            _write_atomic(suffix % index, lambda f, chunk=lines: dumper(chunk, f))
            lines, index = [], index + 1
    if lines:
        _write_atomic(suffix % index, lambda f: dumper(lines, f))


def cluster_files_reader(files_pattern, trainer_count, trainer_id, loader=safe_pickle_load):
    """A reader over the files matching ``files_pattern`` (sorted) whose index modulo
    ``trainer_count`` is ``trainer_id``; each file holds a list of samples (``loader(f)``)."""
    def reader():
        if not callable(loader):
            raise TypeError("loader should be callable.")
        files = sorted(glob.glob(files_pattern))
        for fn in files[trainer_id::trainer_count] if trainer_count > 0 else []:
            with _reading(fn), open(fn, "rb") as f:
                samples = loader(f)
            yield from samples
    return reader


def convert(output_path, reader, line_count, name_prefix):
    """Paddle wrote RecordIO files here, a format graphc does not write."""
    raise DatasetFileError(
        f"paddle.dataset.common.convert({output_path!r}, ..., {name_prefix!r}): graphc does not "
        "write RecordIO; use paddle.dataset.common.split (pickled chunks) or feed the reader")

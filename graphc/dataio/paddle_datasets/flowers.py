"""``paddle.dataset.flowers``: Oxford 102 Flowers (``102flowers.tgz`` of JPEGs,
``imagelabels.mat``, ``setid.mat``) in ``DATA_HOME/flowers``; images resized, cropped, CHW."""

from __future__ import annotations

import functools
import io

import numpy as np

from . import common

__all__ = ["train", "test", "valid", "fetch", "convert"]

DATA_URL = "http://paddlemodels.bj.bcebos.com/flowers/102flowers.tgz"
LABEL_URL = "http://paddlemodels.bj.bcebos.com/flowers/imagelabels.mat"
SETID_URL = "http://paddlemodels.bj.bcebos.com/flowers/setid.mat"
DATA_MD5 = "52808999861908f626f3c1f4e79d11fa"
LABEL_MD5 = "e0620be6f572b9609742df49c70aed4d"
SETID_MD5 = "a5357ecc9cb78c4bef273ce3793fc85c"
# Paddle swaps the official sets: the official test set (tstid) is the larger one
TRAIN_FLAG = "tstid"
TEST_FLAG = "trnid"
VALID_FLAG = "valid"


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise common.DatasetError("paddle.dataset.flowers decodes JPEGs with Pillow; "
                                  "pip install pillow") from None
    return Image


def load_image_bytes(data, is_color=True, where="<image>"):
    """An HWC uint8 image in BGR channel order (as OpenCV decodes it for Paddle)."""
    image_cls = _pil()
    with common.reading(where, "the image"):
        img = image_cls.open(io.BytesIO(data))
        img = np.asarray(img.convert("RGB" if is_color else "L"))
    return img[:, :, ::-1] if is_color else img


def _resize_short(im, size):
    h, w = im.shape[:2]
    h_new, w_new = (size * h // w, size) if h > w else (size, size * w // h)
    image_cls = _pil()
    resized = image_cls.fromarray(np.ascontiguousarray(im)).resize(
        (w_new, h_new), image_cls.Resampling.BICUBIC)
    return np.asarray(resized)


def simple_transform(im, resize_size, crop_size, is_train, is_color=True, mean=None):
    """Paddle's ``image.simple_transform``: shorter side to ``resize_size``, a random (train)
    or centre crop of ``crop_size``, a random left-right flip (train), CHW float32 minus
    ``mean``. Random choices come from numpy's global generator, as in Paddle."""
    im = _resize_short(im, resize_size)
    h, w = im.shape[:2]
    if is_train:
        h0 = np.random.randint(0, h - crop_size + 1)
        w0 = np.random.randint(0, w - crop_size + 1)
    else:
        h0, w0 = (h - crop_size) // 2, (w - crop_size) // 2
    im = im[h0:h0 + crop_size, w0:w0 + crop_size]
    if is_train and np.random.randint(2) == 0:
        im = im[:, ::-1]
    if im.ndim == 3:
        im = im.transpose(2, 0, 1)
    im = im.astype("float32")
    if mean is not None:
        mean = np.asarray(mean, dtype=np.float32)
        if mean.ndim == 1 and is_color:
            mean = mean[:, None, None]
        im -= mean
    return im


def default_mapper(is_train, sample):
    img, label = sample
    img = load_image_bytes(img)
    img = simple_transform(img, 256, 224, is_train, mean=[103.94, 116.78, 123.68])
    return img.flatten().astype("float32"), label


train_mapper = functools.partial(default_mapper, True)
test_mapper = functools.partial(default_mapper, False)


def _mat(path, key):
    from scipy import io as scio
    try:
        table = scio.loadmat(path)
    except Exception as exc:  # scipy raises its own MatReadError and plain ValueErrors
        raise common.DatasetFileError(f"{path}: the MATLAB file is not in the expected format "
                                      f"({type(exc).__name__}: {exc})") from None
    if key not in table:
        raise common.DatasetFileError(f"{path}: the MATLAB file has no {key!r} array")
    return np.asarray(table[key]).reshape(-1)


def reader_creator(data_file, label_file, setid_file, dataset_name, mapper, buffered_size=1024,
                   use_xmap=True, cycle=False):
    """Samples ``mapper((jpeg bytes, label - 1))`` of the set ``dataset_name``, in archive
    order. Paddle maps with threads when ``use_xmap`` (its order then varies); graphc maps
    in order, so ``buffered_size``/``use_xmap`` change nothing."""
    labels = _mat(label_file, "labels")
    indexes = _mat(setid_file, dataset_name)
    img2label = {}
    for i in indexes:
        if not 1 <= int(i) <= len(labels):
            raise common.DatasetFileError(f"{setid_file}: image index {int(i)} is outside the "
                                          f"{len(labels)} labels of {label_file}")
        img2label[f"jpg/image_{int(i):05d}.jpg"] = labels[int(i) - 1]

    def reader():
        while True:
            with common.open_tar(data_file) as tar, \
                    common.reading(data_file, "the flowers archive"):
                for member in tar:
                    if member.name in img2label:
                        data = common.tar_member(tar, member, data_file).read()
                        yield mapper((data, int(img2label[member.name]) - 1))
            if not cycle:
                break
    return reader


def _files():
    return (common.download(DATA_URL, "flowers", DATA_MD5),
            common.download(LABEL_URL, "flowers", LABEL_MD5),
            common.download(SETID_URL, "flowers", SETID_MD5))


def train(mapper=train_mapper, buffered_size=1024, use_xmap=True, cycle=False):
    return reader_creator(*_files(), TRAIN_FLAG, mapper, buffered_size, use_xmap, cycle=cycle)


def test(mapper=test_mapper, buffered_size=1024, use_xmap=True, cycle=False):
    return reader_creator(*_files(), TEST_FLAG, mapper, buffered_size, use_xmap, cycle=cycle)


def valid(mapper=test_mapper, buffered_size=1024, use_xmap=True):
    return reader_creator(*_files(), VALID_FLAG, mapper, buffered_size, use_xmap)


def fetch():
    _files()


def convert(path):
    common.convert(path, train(), 1000, "flowers_train")

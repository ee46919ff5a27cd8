"""``paddle.dataset.image``: Paddle's image helpers for readers (decode to HWC BGR uint8 as
OpenCV does, shorter-side resize, crops, flip, CHW, mean subtraction), on Pillow and NumPy."""

from __future__ import annotations

import io

import numpy as np

from ...runtime.checkpoint import CheckpointError

__all__ = ["center_crop", "left_right_flip", "load_and_transform", "load_image",
           "load_image_bytes", "random_crop", "resize_short", "simple_transform", "to_chw"]


class ImageError(CheckpointError):
    """An image that cannot be read, or an argument the helpers refuse."""


def _decode(source, is_color: bool, what: str) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(source) as img:
            img = img.convert("RGB" if is_color else "L")
            arr = np.asarray(img, dtype=np.uint8)
    except (OSError, UnidentifiedImageError) as exc:
        raise ImageError(f"cannot decode the image {what}: {exc}") from None
    # OpenCV's channel order, as Paddle's cv2-based helpers return
    return np.ascontiguousarray(arr[:, :, ::-1]) if is_color else arr


def load_image_bytes(bytes, is_color=True):
    """An encoded image (bytes) as HWC BGR uint8 (HW when not ``is_color``)."""
    return _decode(io.BytesIO(bytes), is_color, "from bytes")


def load_image(file, is_color=True):
    """The image file ``file`` as HWC BGR uint8 (HW when not ``is_color``)."""
    return _decode(file, is_color, repr(str(file)))


def resize_short(im, size):
    """``im`` resized (bicubic) so its shorter side is ``size``, the aspect ratio kept."""
    from PIL import Image
    h, w = im.shape[:2]
    h_new, w_new = size, size
    if h > w:
        h_new = size * h // w
    else:
        w_new = size * w // h
    if im.ndim == 2:
        return np.asarray(Image.fromarray(im).resize((w_new, h_new), Image.BICUBIC))
    channels = [np.asarray(Image.fromarray(np.ascontiguousarray(im[:, :, c])).resize(
        (w_new, h_new), Image.BICUBIC)) for c in range(im.shape[2])]
    return np.stack(channels, axis=2)


def to_chw(im, order=(2, 0, 1)):
    """HWC -> CHW (or the axis ``order`` given)."""
    if len(order) != im.ndim:
        raise ImageError(f"to_chw: order {order} does not fit an image of rank {im.ndim}")
    return im.transpose(order)


def _check_crop(im, size, who):
    h, w = im.shape[:2]
    if size > h or size > w:
        raise ImageError(f"{who}: crop size {size} exceeds the image ({h} x {w})")
    return h, w


def center_crop(im, size, is_color=True):
    """The central ``size`` x ``size`` window of an HWC (or HW) image."""
    h, w = _check_crop(im, size, "center_crop")
    top, left = (h - size) // 2, (w - size) // 2
    return im[top:top + size, left:left + size]


def random_crop(im, size, is_color=True):
    """A ``size`` x ``size`` window at a uniformly random place (NumPy's global RNG)."""
    h, w = _check_crop(im, size, "random_crop")
    top, left = np.random.randint(0, h - size + 1), np.random.randint(0, w - size + 1)
    return im[top:top + size, left:left + size]


def left_right_flip(im, is_color=True):
    """The image mirrored left to right."""
    return im[:, ::-1]


def simple_transform(im, resize_size, crop_size, is_train, is_color=True, mean=None):
    """resize_short, then a random crop and a coin-flip mirror (``is_train``) or the
    central crop; CHW for a colour image; float32 less ``mean`` (per channel, or whole)."""
    im = resize_short(im, resize_size)
    if is_train:
        im = random_crop(im, crop_size, is_color)
        if np.random.randint(2) == 0:
            im = left_right_flip(im, is_color)
    else:
        im = center_crop(im, crop_size, is_color)
    if im.ndim == 3:
        im = to_chw(im)
    im = im.astype("float32")
    if mean is not None:
        mean = np.asarray(mean, dtype=np.float32)
        if mean.ndim == 1 and is_color:
            mean = mean[:, np.newaxis, np.newaxis]
        elif mean.ndim > 1 and mean.shape != im.shape:
            raise ImageError(f"simple_transform: mean of shape {list(mean.shape)} does not "
                             f"match the image {list(im.shape)}")
        im -= mean
    return im


def load_and_transform(filename, resize_size, crop_size, is_train, is_color=True, mean=None):
    """load_image then simple_transform."""
    return simple_transform(load_image(filename, is_color), resize_size, crop_size, is_train,
                            is_color, mean)

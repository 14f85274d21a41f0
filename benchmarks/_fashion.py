"""Fashion-MNIST for the benchmarks and examples, from wherever it already is (not part of ste's API).

:func:`load` tries, in order:

1. an explicit folder (``--data DIR``): it must hold the four IDX files, gzipped or not;
2. the Debian / Ubuntu package's folder (``apt-get install dataset-fashion-mnist``);
3. Keras's cache (``$KERAS_HOME/datasets/fashion-mnist``, by default ``~/.keras/datasets/fashion-mnist``);
4. ``keras.datasets.fashion_mnist.load_data()``, which downloads into that cache.

A folder that is given explicitly, or that the Debian package installed, must be whole and well-formed: a missing
file, a wrong IDX magic number, a truncated file or images and labels of different counts raise
:class:`FashionDataError` with one line naming the file and the fix, before anything trains. If no source has the
data, the error lists each source tried and why it failed.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ste

__all__ = ["DEBIAN", "FILES", "Fashion", "FashionDataError", "keras_cache", "load", "read_idx"]

DEBIAN = Path("/usr/share/datasets/fashion-mnist")  # the dataset-fashion-mnist package's folder
FILES = {  # the names the Fashion-MNIST release, the Debian package and Keras's cache all use (each also as .gz)
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
HOW = (
    "get it with `apt-get install dataset-fashion-mnist` (Debian, Ubuntu), or on a machine with network access "
    "`python -c 'import keras; keras.datasets.fashion_mnist.load_data()'` (fills Keras's cache), or pass --data DIR "
    f"with the four IDX files ({', '.join(name + '.gz' for name in FILES.values())})"
)


class FashionDataError(ste.STEError, ValueError):
    """Fashion-MNIST is missing, incomplete or corrupted where it was looked for."""


@dataclass(frozen=True)
class Fashion:
    """The four arrays (images uint8 ``(n, 28, 28)``, labels uint8 ``(n,)``) and where they came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str


def keras_cache() -> Path:
    """Keras's dataset cache for Fashion-MNIST (``KERAS_HOME`` as Keras reads it)."""
    home = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras"))
    return home / "datasets" / "fashion-mnist"


def _file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / (name + ".gz"), folder / name):
        if candidate.is_file():
            return candidate
    return None


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """An unsigned-byte IDX file (gzipped if its name ends in ``.gz``) with ``ndim`` dimensions, as uint8."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as stream:
                raw = stream.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:  # a truncated or damaged gzip stream
        raise FashionDataError(f"Fashion-MNIST: cannot read {path} ({error}); replace the file: {HOW}.") from None
    magic = bytes([0, 0, 0x08, ndim])
    if raw[:4] != magic:
        raise FashionDataError(
            f"Fashion-MNIST: {path} is not an unsigned-byte IDX file with {ndim} dimension(s): magic number "
            f"{raw[:4].hex() or 'empty'}, expected {magic.hex()}; replace the file: {HOW}."
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise FashionDataError(f"Fashion-MNIST: {path} is truncated inside its header; replace the file: {HOW}.")
    shape = tuple(int(d) for d in np.frombuffer(raw[4:header], dtype=">u4"))
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise FashionDataError(
            f"Fashion-MNIST: {path} holds {len(raw) - header} data bytes, its header {shape} says {size} "
            f"({'truncated' if len(raw) - header < size else 'trailing bytes'}); replace the file: {HOW}."
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _read_folder(folder: Path) -> Fashion:
    missing = [name for name in FILES.values() if _file(folder, name) is None]
    if missing:
        raise FashionDataError(f"Fashion-MNIST: {folder} lacks {', '.join(missing)} (.gz or not); {HOW}.")
    arrays = {key: read_idx(_file(folder, name), 3 if key.startswith("x") else 1) for key, name in FILES.items()}  # type: ignore[arg-type]
    for split in ("train", "test"):
        images, labels = arrays["x_" + split], arrays["y_" + split]
        if images.shape[1:] != (28, 28) or len(images) != len(labels):
            raise FashionDataError(
                f"Fashion-MNIST: {folder}'s {split} files hold images {images.shape} and labels {labels.shape}; "
                f"expected (n, 28, 28) and (n,); replace them: {HOW}."
            )
        if labels.size and labels.max() > 9:
            raise FashionDataError(
                f"Fashion-MNIST: {folder}'s {split} labels reach {int(labels.max())}, expected 0-9; "
                f"replace them: {HOW}."
            )
    return Fashion(**arrays, source=str(folder))


def _keras_download() -> Fashion:
    import keras

    (x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()
    return Fashion(x_train, y_train, x_test, y_test, source="keras.datasets.fashion_mnist.load_data()")


def load(
    data: str | Path | None = None,
    *,
    debian: Path | None = None,
    cache: Path | None = None,
    download: Callable[[], Fashion] | None = _keras_download,
) -> Fashion:
    """Fashion-MNIST from ``data``, else the Debian folder, else Keras's cache, else ``download()`` (``None``: never
    download). ``debian`` and ``cache`` replace the default folders (tests use them)."""
    if data is not None:
        folder = Path(data)
        if not folder.is_dir():
            raise FashionDataError(f"Fashion-MNIST: --data {folder} is not a folder; {HOW}.")
        return _read_folder(folder)
    tried = []
    debian = DEBIAN if debian is None else debian
    if debian.is_dir():
        return _read_folder(debian)  # an installed package that is broken is said so, not skipped
    tried.append(f"{debian} (no such folder)")
    cache = keras_cache() if cache is None else cache
    if cache.is_dir() and all(_file(cache, name) for name in FILES.values()):
        return _read_folder(cache)
    tried.append(f"{cache} ({'incomplete' if cache.is_dir() else 'no such folder'})")
    if download is not None:
        try:
            return download()
        except Exception as error:  # any failure to download is reported with the others
            tried.append(f"keras.datasets.fashion_mnist.load_data() ({type(error).__name__}: {error})"[:300])
    else:
        tried.append("no download (not allowed here)")
    raise FashionDataError(f"Fashion-MNIST not found; tried {'; '.join(tried)}. {HOW[0].upper() + HOW[1:]}.")

"""The Fashion-MNIST loader of the benchmarks: its order of sources and its one-line errors, on tiny IDX files written
here (the format from the Fashion-MNIST / MNIST release: big-endian magic 0x0000 08 NDIM, NDIM big-endian uint32
sizes, then the bytes). Nothing here downloads."""

from __future__ import annotations

import gzip
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ste  # noqa: E402
from benchmarks import _fashion  # noqa: E402
from benchmarks._fashion import FILES, FashionDataError, load  # noqa: E402


def _idx(array: np.ndarray, magic: bytes | None = None) -> bytes:
    head = magic if magic is not None else bytes([0, 0, 0x08, array.ndim])
    return head + struct.pack(">" + "I" * array.ndim, *array.shape) + array.astype(np.uint8).tobytes()


def _write(folder: Path, n_train: int = 5, n_test: int = 3, gz: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 28, 28)),
        "y_train": rng.integers(0, 10, n_train),
        "x_test": rng.integers(0, 256, (n_test, 28, 28)),
        "y_test": rng.integers(0, 10, n_test),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for key, name in FILES.items():
        data = _idx(arrays[key])
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_reads_the_idx_files_it_is_given(tmp_path: Path, gz: bool) -> None:
    arrays = _write(tmp_path / "d", gz=gz)
    data = load(tmp_path / "d", download=None)
    for key in FILES:
        np.testing.assert_array_equal(getattr(data, key), arrays[key])
    assert data.x_train.dtype == np.uint8 and data.source == str(tmp_path / "d")


def test_order_explicit_then_debian_then_cache(tmp_path: Path) -> None:
    debian, cache, explicit = tmp_path / "debian", tmp_path / "cache", tmp_path / "explicit"
    _write(cache, n_train=4)
    assert load(debian=debian, cache=cache, download=None).source == str(cache)
    _write(debian, n_train=6)
    assert load(debian=debian, cache=cache, download=None).source == str(debian)
    _write(explicit, n_train=2)
    assert len(load(explicit, debian=debian, cache=cache, download=None).x_train) == 2


def test_an_incomplete_keras_cache_falls_through_to_the_download(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _write(cache)
    (cache / (FILES["y_test"] + ".gz")).unlink()
    sentinel = _fashion.Fashion(*(np.zeros((1, 28, 28), np.uint8), np.zeros(1, np.uint8)) * 2, source="dl")
    assert load(debian=tmp_path / "no", cache=cache, download=lambda: sentinel) is sentinel


def test_nothing_found_names_every_source_and_the_fix(tmp_path: Path) -> None:
    def offline() -> _fashion.Fashion:
        raise OSError("network unreachable")

    with pytest.raises(FashionDataError) as info:
        load(debian=tmp_path / "debian", cache=tmp_path / "cache", download=offline)
    message = str(info.value)
    assert "\n" not in message
    for part in (str(tmp_path / "debian"), str(tmp_path / "cache"), "load_data()", "network unreachable"):
        assert part in message
    assert "apt-get install dataset-fashion-mnist" in message and "--data" in message
    assert isinstance(info.value, ste.STEError) and isinstance(info.value, ValueError)


def _one_line_error(folder: Path, *needles: str) -> None:
    with pytest.raises(FashionDataError) as info:
        load(folder, download=None)
    message = str(info.value)
    assert "\n" not in message and "dataset-fashion-mnist" in message, message
    for needle in needles:
        assert needle in message, message


def test_missing_folder(tmp_path: Path) -> None:
    _one_line_error(tmp_path / "nowhere", "not a folder")


def test_partial_folder_names_the_missing_files(tmp_path: Path) -> None:
    _write(tmp_path)
    (tmp_path / (FILES["x_test"] + ".gz")).unlink()
    (tmp_path / (FILES["y_train"] + ".gz")).unlink()
    _one_line_error(tmp_path, FILES["x_test"], FILES["y_train"])


def test_a_broken_debian_folder_is_reported_not_skipped(tmp_path: Path) -> None:
    _write(tmp_path / "debian")
    (tmp_path / "debian" / (FILES["x_train"] + ".gz")).unlink()
    _write(tmp_path / "cache")
    with pytest.raises(FashionDataError, match=FILES["x_train"]):
        load(debian=tmp_path / "debian", cache=tmp_path / "cache", download=None)


def test_wrong_magic_number(tmp_path: Path) -> None:
    _write(tmp_path, gz=False)
    labels = np.zeros(3, np.uint8)  # a labels file where the images file belongs: 1 dimension, not 3
    (tmp_path / FILES["x_test"]).write_bytes(_idx(labels))
    _one_line_error(tmp_path, FILES["x_test"], "magic number 00000801", "expected 00000803")


def test_not_idx_at_all(tmp_path: Path) -> None:
    _write(tmp_path)
    (tmp_path / (FILES["y_train"] + ".gz")).write_bytes(gzip.compress(b"<html>Not Found</html>"))
    _one_line_error(tmp_path, FILES["y_train"], "magic number")


def test_truncated_data(tmp_path: Path) -> None:
    _write(tmp_path, gz=False)
    path = tmp_path / FILES["x_train"]
    path.write_bytes(path.read_bytes()[:-100])
    _one_line_error(tmp_path, FILES["x_train"], "truncated")


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    _write(tmp_path)
    path = tmp_path / (FILES["x_train"] + ".gz")
    path.write_bytes(path.read_bytes()[:-40])
    _one_line_error(tmp_path, FILES["x_train"], "cannot read")


def test_images_and_labels_of_different_counts(tmp_path: Path) -> None:
    _write(tmp_path, gz=False)
    (tmp_path / FILES["y_test"]).write_bytes(_idx(np.zeros(2, np.uint8)))  # 3 test images
    _one_line_error(tmp_path, "test files", "(3, 28, 28)", "(2,)")


def test_labels_out_of_range(tmp_path: Path) -> None:
    _write(tmp_path, gz=False)
    (tmp_path / FILES["y_train"]).write_bytes(_idx(np.full(5, 10, np.uint8)))
    _one_line_error(tmp_path, "reach 10")


def test_the_real_data_when_installed() -> None:
    if not _fashion.DEBIAN.is_dir() and not _fashion.keras_cache().is_dir():
        pytest.skip("Fashion-MNIST is not installed here (apt-get install dataset-fashion-mnist); no download in tests")
    data = load(download=None)
    assert data.x_train.shape == (60000, 28, 28) and data.x_test.shape == (10000, 28, 28)
    # the release's test set has 1,000 images of each of the 10 classes
    np.testing.assert_array_equal(np.bincount(data.y_test, minlength=10), np.full(10, 1000))

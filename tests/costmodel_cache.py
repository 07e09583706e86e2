"""Feature matrices of the cost-model record logs (tests/data/costmodel/*.jsonl.gz), cached.

Extracting the features of the ~5000 logged programs (replay, lower, walk) takes minutes of
CPU, so the result of `load_dataset(log)` is stored beside each log as `<name>.features.xz`,
and `tests/data/costmodel/features_key.json` records the SHA-256 of the log (and the cache
format) each cache was computed from; a cache whose key does not match is computed again.

A change of lowering or feature code can change the features without touching the logs: the
test `test_cached_features_equal_a_fresh_extraction` compares the cache with a fresh extraction
of the first records of every log and fails when they differ. `python -m tests.costmodel_cache`
then recomputes every cache (commit the result with the change).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import pathlib
import tempfile
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "costmodel"
KEY_FILE = DATA / "features_key.json"
FORMAT = 1  # bump when the cache layout below changes


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cache_path(log: pathlib.Path) -> pathlib.Path:
    return log.with_name(log.name.split(".")[0] + ".features.xz")


def _encode(data) -> bytes:
    """The Dataset as an lzma-compressed .npz: the distinct feature values and, per row, uint16
    indices into them (the matrices hold few distinct values: log2 of counts), which packs
    several times smaller than the float32 rows."""
    rows = np.array([len(f) for f in data.features], dtype=np.int64)
    flat = np.concatenate(data.features) if data.features else np.zeros((0, 0), np.float32)
    values, index = np.unique(flat, return_inverse=True)
    dtype = np.uint16 if len(values) <= 1 << 16 else np.uint32
    buf = io.BytesIO()
    np.savez(
        buf,
        values=values,
        index=index.reshape(flat.shape).astype(dtype),
        rows=rows,
        throughputs=data.throughputs,
        task_ids=np.array(data.task_ids, dtype=str),
    )
    return lzma.compress(buf.getvalue(), preset=9)


def _decode(blob: bytes):
    from autosched.search.cost_model import Dataset

    with np.load(io.BytesIO(lzma.decompress(blob))) as z:
        flat = z["values"][z["index"]]
        features = np.split(flat, np.cumsum(z["rows"])[:-1]) if len(z["rows"]) else []
        return Dataset(list(features), z["throughputs"], [str(t) for t in z["task_ids"]])


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _read_keys() -> dict:
    try:
        return json.loads(KEY_FILE.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def cached_dataset(log: str | os.PathLike, n_jobs: int | None = None, rebuild: bool = False):
    """`load_dataset(log)`, from the cache beside the log when its key matches (and not
    `rebuild`); otherwise computed (on `n_jobs` processes, default every core) and cached."""
    from autosched.search.cost_model import load_dataset

    log = pathlib.Path(log)
    key = {"log": _sha256(log.read_bytes()), "format": FORMAT}
    cache = _cache_path(log)
    if not rebuild and _read_keys().get(log.name) == key and cache.is_file():
        return _decode(cache.read_bytes())
    data = load_dataset(str(log), n_jobs=n_jobs or os.cpu_count() or 1)
    _write_atomically(cache, _encode(data))
    keys = _read_keys()
    keys[log.name] = key
    _write_atomically(KEY_FILE, (json.dumps(keys, indent=1, sort_keys=True) + "\n").encode())
    warnings.warn(
        f"the feature cache of {log.name} was missing or stale and has been recomputed: commit "
        f"{cache.relative_to(ROOT)} and {KEY_FILE.relative_to(ROOT)} with the change",
        stacklevel=2,
    )
    return data


def main() -> None:
    """Recompute every log's cache with the current code."""
    for log in sorted(DATA.glob("*.jsonl.gz")):
        data = cached_dataset(log, rebuild=True)
        print(f"{log.name}: {len(data)} programs, cache {_cache_path(log).name} rewritten")


__all__ = ["cached_dataset"]

if __name__ == "__main__":  # python -m tests.costmodel_cache
    main()

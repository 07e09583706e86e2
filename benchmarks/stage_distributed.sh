#!/usr/bin/env bash
# Stage the `distributed` extra for the GPU machine, which cannot download: the wheels of
# dask[distributed] and of what it needs that the GPU machine lacks (it has Python 3.12 with
# numpy, networkx, msgpack, PyTorch and CuPy), for CPython 3.12 on manylinux x86_64, into
# .gpu/wheels-distributed/. Carry `.gpu` to that machine (64 MiB in all) and install there with
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/wheels-distributed/*.whl
# (the directory .gpu/env.sh puts on PYTHONPATH; `python3 -m distributed.cli.dask_scheduler`
# and `... dask_worker` then start a cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu/wheels-distributed
rm -rf "$dest"
mkdir -p "$dest"
python3 -m pip download -q --dest "$dest" --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    'dask[distributed]==2026.8.0'
# already on the GPU machine (a second copy could shadow the one its other packages were built with)
rm -f "$dest"/numpy-*.whl "$dest"/msgpack-*.whl "$dest"/networkx-*.whl
ls "$dest"
du -sh "$dest" .gpu

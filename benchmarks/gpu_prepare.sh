#!/usr/bin/env bash
# Fills `.whl/` (pure-Python wheels the offline GPU machine lacks) and `.gpudata/` (the real data
# sets) for `benchmarks/gpu_run.sh`. Run here, with the package registry reachable; both folders
# are git-ignored and carried to the device machine.
set -e
mkdir -p .whl .gpudata
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl \
  "blackjax==1.7.1" "arviz==0.23.4" "numpyro==0.22.0" h5netcdf xarray-einstats platformdirs
data=${EFFPPL_DATA_DIR:-models/data}  # the data sets ship with the repository
cp "$data"/SP500.csv "$data"/UCBadmit.csv "$data"/births_usa_1969.csv .gpudata/
ls .whl .gpudata

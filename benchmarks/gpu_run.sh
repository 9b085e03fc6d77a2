#!/usr/bin/env bash
# The GPU check, as one prepared script, most important step first (a session's device time is
# short). Run on a machine with a CUDA JAX already installed; when it is offline, first run
# `bash benchmarks/gpu_prepare.sh` on a machine with the package registry, and carry `.whl` and
# `.gpudata` along (the device tool: carry=[".whl", ".gpudata"]).
# 1. the effects, handler and MCMC tests on the GPU (the device's JAX may be newer than ours);
# 2. end-to-end NUTS, effppl vs NumPyro (HMC runs on the GPU unchanged), quick sizes;
# 3. the paper-size harness, one model per run so each finished model is kept: N evaluations of
#    every model, no NUTS (NUM_EVALS, default 10000; the HMM's 5,000-step scan costs ~64 s per
#    1,000 evaluations per framework on an H200, so it is left out unless PAPER_MODELS names it).
# The whole script keeps to BUDGET seconds (default 540): the tests get TEST_TIMEOUT, the quick runs
# end by second QUICK_END (default 330), the paper-size runs by BUDGET. Everything lands in
# ${OUT:-benchmarks/results}/gpu_results.tar.gz (JSON and logs; plots: `_report.plot` of a JSON)
# and the whole log in gpu_run.log.
set -o pipefail
OUT=${OUT:-benchmarks/results}
RES=$(mktemp -d)
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_run.log") 2>&1
BUDGET=${BUDGET:-540}
cap() { local l=$((BUDGET - SECONDS)); l=$(( l < $1 ? l : $1 )); echo $(( l < 1 ? 1 : l )); }
# Each model in its own run, so a run cut off loses only its model: runs MODE MODELS END MIN ARGS...
# runs MODE on each of MODELS until the script's END-th second, starting none with under MIN left.
runs() {
  local mode=$1 models=$2 end=$3 min=$4 model; shift 4
  for model in $(echo $models | tr , ' '); do
    if [ $((end - SECONDS)) -lt $min ]; then echo "== no time left for $mode $model"; continue; fi
    timeout $((end - SECONDS)) python3 -m benchmarks --$mode --models $model --no-progress \
      --frameworks effppl,numpyro,handwritten --json "$RES/${mode}_gpu_${model}.json" "$@" \
      2>&1 | tee "$RES/${mode}_gpu_${model}.log"
    echo "== $mode $model done at ${SECONDS}s"
  done
}
export PYTHONUNBUFFERED=1 JAX_ENABLE_X64=0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
if [ -d .gpudata ]; then export EFFPPL_DATA_DIR=$PWD/.gpudata; fi
nvidia-smi -L
python3 -c "import jax, numpyro, blackjax; print('jax', jax.__version__, 'numpyro', numpyro.__version__, 'blackjax', blackjax.__version__, jax.devices())"

# Tests: several workers on the one GPU (compilation is CPU-bound), without preallocation.
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $(cap ${TEST_TIMEOUT:-110}) python3 -m pytest -q \
  -p no:cacheprovider $workers -m "not slow" \
  tests/effects/test_translate.py tests/handlers/test_handlers.py tests/inference/test_mcmc.py \
  2>&1 | tail -25 | tee "$RES/gpu_tests.log"
echo "== tests done at ${SECONDS}s"

runs quick ${QUICK_MODELS:-proportion_test,hmm,ucbadmit,hsgp} ${QUICK_END:-330} 30
runs paper ${PAPER_MODELS:-proportion_test,stochastic_volatility,bnn,ucbadmit,hsgp} $BUDGET 40 \
  --num-evals ${NUM_EVALS:-10000} --no-nuts
tar -czf "$OUT/gpu_results.tar.gz" -C "$RES" .
ls -l "$RES"

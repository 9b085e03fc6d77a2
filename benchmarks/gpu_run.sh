#!/usr/bin/env bash
# The GPU check, as one prepared script, most important step first (a session's device time is
# short). Run on a machine with a CUDA JAX already installed; when it is offline, first run
# `bash benchmarks/gpu_prepare.sh` on a machine with the package registry, and carry `.whl` and
# `.gpudata` along (the device tool: carry=[".whl", ".gpudata"]). Writes to ${OUT:-benchmarks/results}.
# 1. the effects and handler tests on the GPU (the device's JAX may be newer than ours);
# 2. end-to-end NUTS, effppl vs NumPyro (HMC runs on the GPU unchanged), quick sizes;
# 3. the paper-size harness: N evaluations of every model, no NUTS (NUM_EVALS, default 1000;
#    the HMM's 5,000-step scan costs ~64 s per 1,000 evaluations per framework on an H200).
# Each step has its own time limit (TEST_TIMEOUT, QUICK_TIMEOUT, PAPER_TIMEOUT, seconds).
set -o pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 JAX_ENABLE_X64=0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
if [ -d .gpudata ]; then export EFFPPL_DATA_DIR=$PWD/.gpudata; fi
nvidia-smi -L
python3 -c "import jax, numpyro, blackjax; print('jax', jax.__version__, 'numpyro', numpyro.__version__, 'blackjax', blackjax.__version__, jax.devices())"

timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -m "not slow" \
  tests/effects/test_translate.py tests/handlers/test_handlers.py tests/inference/test_mcmc.py \
  2>&1 | tail -15 | tee "$OUT/gpu_tests.log"

timeout ${QUICK_TIMEOUT:-240} python3 -m benchmarks --quick --frameworks effppl,numpyro,handwritten \
  --models ${QUICK_MODELS:-proportion_test,hmm,ucbadmit,hsgp} --no-progress \
  --json "$OUT/quick_gpu.json" --plot "$OUT/quick_gpu.png" 2>&1 | tee "$OUT/quick_gpu.log"

timeout ${PAPER_TIMEOUT:-330} python3 -m benchmarks --paper --num-evals ${NUM_EVALS:-1000} \
  --frameworks effppl,numpyro,handwritten --models ${PAPER_MODELS:-proportion_test,stochastic_volatility,bnn,ucbadmit,hsgp,hmm} \
  --no-nuts --no-progress --json "$OUT/paper_gpu_n${NUM_EVALS:-1000}.json" \
  --plot "$OUT/paper_gpu_n${NUM_EVALS:-1000}.png" 2>&1 | tee "$OUT/paper_gpu.log"

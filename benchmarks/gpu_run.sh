#!/usr/bin/env bash
# The GPU check, as one prepared script (run on a machine with a CUDA JAX already installed and,
# when offline, the pure-Python wheels of blackjax/arviz/numpyro in .whl/). Writes to ${OUT:-.}.
# 1. the effects and handler tests on the GPU; 2. the paper-size harness (N evaluations, no NUTS);
# 3. the quick harness with the end-to-end NUTS comparison.
set -o pipefail
OUT=${OUT:-benchmarks/results}
export PYTHONUNBUFFERED=1 JAX_ENABLE_X64=0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
nvidia-smi -L
python3 -c "import jax, numpyro, blackjax; print('jax', jax.__version__, 'numpyro', numpyro.__version__, 'blackjax', blackjax.__version__, jax.devices())"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/effects/test_translate.py \
  tests/handlers/test_handlers.py 2>&1 | tail -15 | tee "$OUT/gpu_tests.log"
timeout ${PAPER_TIMEOUT:-330} python3 -m benchmarks --paper --num-evals ${NUM_EVALS:-1000} \
  --frameworks effppl,numpyro,handwritten --no-nuts --no-progress \
  --json "$OUT/paper_gpu_n${NUM_EVALS:-1000}.json" 2>&1 | tee "$OUT/paper_gpu.log"
timeout ${QUICK_TIMEOUT:-120} python3 -m benchmarks --quick --frameworks effppl,numpyro,handwritten \
  --no-progress --json "$OUT/quick_gpu.json" 2>&1 | tee "$OUT/quick_gpu.log"

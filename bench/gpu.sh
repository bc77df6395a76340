#!/usr/bin/env bash
# The GPU measurements of bench/results/*_gpu.json, in one command on a machine with one NVIDIA
# GPU and JAX's CUDA plugin (jfed and its dependencies importable; wheels in .whl/ are installed
# first where the machine has no package index), from the repository's root:
#
#     bash bench/gpu.sh [benches|tests|all]     # results and logs under $OUT (default /tmp/jfed_gpu)
#
# benches: bench/engine.py at 10^6..10^8 (numpy to 10^7), bench/plans.py at 10^8 (chunk widths
# and the CPU's conditionals on the GPU), bench/ldp_fl.py at 100 clients x 30 images (PyTorch's
# loop on the GPU where torch sees CUDA), bench/draws.py at 10^7 clients. tests: the test suite
# with the GPU as JAX's default backend (JAX_PLATFORMS=cuda,cpu). Each stage has a time limit so
# that the whole fits one 10-minute command; a stage cut short says so in the log.
set -u
what=${1:-all}
out=${OUT:-/tmp/jfed_gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
log="$out/log.txt"
if [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >> "$log" 2>&1 \
    || export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
{
    date; uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "import jax, jfed; print('jax', jax.__version__, jax.devices())"
} >> "$log" 2>&1 || { tail -n 40 "$log"; exit 1; }

stage() {  # stage SECONDS NAME COMMAND...: run with a time limit, log its output
    local limit=$1 name=$2
    shift 2
    echo "=== $name ($(date +%T), limit ${limit}s)" >> "$log"
    timeout -s INT "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    [ $rc -eq 124 ] && echo "=== $name: cut short at ${limit}s" >> "$log"
    echo "=== $name: exit $rc ($(date +%T))" >> "$log"
}

if [ "$what" != tests ]; then
    stage 180 engine python3 bench/engine.py --sizes 1e6,1e7,1e8 --numpy-max 1e7 --no-one-core \
        --json "$out/engine_gpu.json"
    stage 120 ldp_fl python3 bench/ldp_fl.py --images 3000 --clients 100 \
        --json "$out/ldp_fl_gpu.json"
    stage 100 plans python3 bench/plans.py --sizes 1e8 --chunks 65536,262144,1048576,4194304 \
        --with-conditionals --json "$out/plans_gpu.json"
    stage 45 draws python3 bench/draws.py --clients 1e7 --json "$out/draws_gpu.json"
fi
if [ "$what" != benches ]; then
    stage "${TEST_SECONDS:-330}" tests env JAX_PLATFORMS=cuda,cpu python3 -m pytest -q -rfE \
        -n "${TEST_WORKERS:-12}" -p no:cacheprovider --junitxml="$out/junit.xml"
fi
tail -n 60 "$log"

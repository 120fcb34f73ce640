#!/usr/bin/env bash
# The GPU rows of two benchmarks, on a lent GPU machine that has torch and transformers but
# no spaCy, no project install and no network. Made here first (see docs/population.md and
# docs/hf-qa.md), carried there as ignored folders:
#   .whl/       pydantic and its needs, cp312 wheels (the machine's Python is 3.12)
#   .gpu/       frozen/ (the systems to run), data/ (a SQuAD mirror), work/ (the prepared
#               folder and the answers of a CPU run: population_scoring.py --work .gpu/work)
#   .gpu-hf/    pipe/ (transformers 4.57.6's wheels, for hf-qa's pipeline baseline), minilm/
#               (the MiniLM config and tokenizer files)
# Usage there: bash benchmarks/on_gpu.sh population|hfqa OUT_DIR [ARGS for the benchmark]
set -uo pipefail
what=$1 out=$2
shift 2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 QASHIFT_WORKSPACE=/tmp/qashift-ws
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'cuda', torch.cuda.is_available())"
case $what in
  population)
    export QASHIFT_FROZEN=$PWD/.gpu/frozen QASHIFT_DATA_DIR=$PWD/.gpu/data
    for device in cpu cuda; do  # one core each: CPU-seconds comparable with the docs' table
      taskset -c 0 python3 benchmarks/population_scoring.py --work .gpu/work --paths prepared \
        --skip-contextual --device "$device" "$@" 2>&1 | tee "$out/population-$device.log"
    done ;;
  hfqa)
    export QASHIFT_DATA_DIR=$PWD/.gpu/data PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.gpu-hf/pipe
    # MiniLM-L6's shape with weights drawn from seed 0: throughput does not depend on them
    python3 -c "import torch; from transformers import AutoConfig as C, \
AutoModelForQuestionAnswering as Q, AutoTokenizer as T; torch.manual_seed(0); \
Q.from_config(C.from_pretrained('.gpu-hf/minilm')).save_pretrained('/tmp/minilm-seed0'); \
T.from_pretrained('.gpu-hf/minilm').save_pretrained('/tmp/minilm-seed0')" || exit 1
    python3 benchmarks/hfqa_throughput.py --model /tmp/minilm-seed0 --device cuda \
      --backends torch --data-dir .gpu/data --json "$out/hfqa-cuda.json" "$@" 2>&1 | tee "$out/hfqa-cuda.log" ;;
  *) echo "usage: on_gpu.sh population|hfqa OUT_DIR [ARGS]" >&2; exit 2 ;;
esac

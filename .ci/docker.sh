#!/usr/bin/env bash
# Make a Docker daemon answer and build the small images the tests need, offline (no registry).
# Idempotent: installs docker.io/debootstrap only if missing, starts dockerd only if no daemon
# answers, and builds qashift/base, qashift/python and qashift/runner:cpu only if their tags
# are missing.
# Run as root on Debian (CI does: bash .ci/docker.sh, before the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
    echo "docker.sh: installing ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    echo "docker.sh: starting dockerd (log: /var/log/qashift-dockerd.log)"
    setsid dockerd >/var/log/qashift-dockerd.log 2>&1 </dev/null &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        echo "docker.sh: dockerd did not come up; last log lines:" >&2
        tail -20 /var/log/qashift-dockerd.log >&2 || true
        exit 1
    fi
fi
echo "docker.sh: daemon $(docker info --format '{{.ServerVersion}}') answers"

# Base (debootstrap + docker import) and python3 images; each skipped when its tag exists.
python3 -c "from evaluator.cli.images import images_group; images_group()" base
python3 -c "from evaluator.cli.images import images_group; images_group()" python

# The standard runner image (top-level Dockerfile) for hf-qa bundles: wheels downloaded on the
# host, installed in the build with --no-index.
if ! docker image inspect qashift/runner:cpu >/dev/null 2>&1; then
    wheels="${QASHIFT_WHEELHOUSE:-/var/cache/qashift-wheels}"
    python3 -c "from evaluator.cli.images import images_group; images_group()" wheelhouse "$wheels"
    python3 -c "from evaluator.cli.images import images_group; images_group()" runner "$wheels"
fi

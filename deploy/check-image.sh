#!/bin/sh
# Build the container image and smoke-check it: runs as non-root, `devicectl --version` works,
# `serve --print-config` loads the example config, `db upgrade` finds the shipped migrations, the
# plugin entry points load and importing the project reads only installed files
# (deploy/image_smoke.py). Needs a running Docker daemon and the base image's registry; not part of
# `make test` (a build takes minutes). Without Docker, tests/deploy/test_image_build.py performs the
# same build and checks. Usage: [PYTHON_IMAGE=base] deploy/check-image.sh [TAG]
# PYTHON_IMAGE names another base image (deploy/build-base-image.sh builds one from Debian's
# packages where the registry's python image cannot be pulled).
set -eu
cd "$(dirname "$0")/.."
tag="${1:-devicectl:check}"
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "check-image.sh: no Docker daemon is running (docker info failed); without Docker run: pytest tests/deploy/test_image_build.py" >&2
    exit 2
fi
if [ -n "${PYTHON_IMAGE:-}" ]; then
    docker build --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" -f deploy/Dockerfile -t "$tag" .
else
    docker build -f deploy/Dockerfile -t "$tag" .
fi
uid="$(docker run --rm --entrypoint id "$tag" -u)"
[ "$uid" != "0" ] || { echo "image runs as root" >&2; exit 1; }
docker run --rm "$tag" --version
docker run --rm -v "$PWD/deploy/examples:/etc/devicectl:ro" "$tag" \
    serve --config /etc/devicectl/devicectl.toml --print-config >/dev/null
docker run --rm "$tag" db upgrade
docker run --rm -i --entrypoint python "$tag" -I - <deploy/image_smoke.py
size="$(docker image inspect -f '{{.Size}}' "$tag")"
echo "image $tag: ok (uid $uid, $((size / 1048576)) MiB)"

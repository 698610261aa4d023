#!/bin/sh
# Build the container image and smoke-check it: runs as non-root, `devicectl --version` works,
# `serve --print-config` loads the example config. Needs a running Docker daemon; not part of
# `make test` (a build takes minutes). Usage: deploy/check-image.sh [TAG]
set -eu
cd "$(dirname "$0")/.."
tag="${1:-devicectl:check}"
docker build -f deploy/Dockerfile -t "$tag" .
uid="$(docker run --rm --entrypoint id "$tag" -u)"
[ "$uid" != "0" ] || { echo "image runs as root" >&2; exit 1; }
docker run --rm "$tag" --version
docker run --rm -v "$PWD/deploy/examples:/etc/devicectl:ro" "$tag" \
    serve --config /etc/devicectl/devicectl.toml --print-config >/dev/null
echo "image $tag: ok (uid $uid)"

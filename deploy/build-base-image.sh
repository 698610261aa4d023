#!/bin/sh
# Build the Python base image (the Dockerfile's PYTHON_IMAGE) from Debian's own packages, for
# machines that reach Debian's archive but not a container registry:
#
#   sudo deploy/build-base-image.sh                      # -> devicectl-python:3.11-bookworm
#   PYTHON_IMAGE=devicectl-python:3.11-bookworm deploy/check-image.sh
#
# A minimal bookworm root (debootstrap --variant=minbase) with python3.11, venv and CA
# certificates, imported into the local Docker daemon. Needs root, debootstrap and a running
# Docker daemon. MIRROR overrides debootstrap's default Debian mirror; EXTRA_CA_CERTS (PEM files,
# space-separated) are trusted in the image too, for a network whose proxy re-signs TLS (the build
# stage's pip then reaches PyPI). Such an image is for checks on that network only.
set -eu
tag="${1:-devicectl-python:3.11-bookworm}"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
# shellcheck disable=SC2086 (MIRROR is one optional word)
debootstrap --variant=minbase --include=python3.11,python3.11-venv,python3-venv,ca-certificates \
    bookworm "$root" ${MIRROR:-}
chroot "$root" python3 --version
for ca in ${EXTRA_CA_CERTS:-}; do
    cp "$ca" "$root/usr/local/share/ca-certificates/$(basename "$ca" .crt).crt"
done
if [ -n "${EXTRA_CA_CERTS:-}" ]; then
    chroot "$root" update-ca-certificates
fi
# no package lists or caches in the image: the build stage installs from PyPI, not apt
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/* "$root"/tmp/*
tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$tag"
echo "base image $tag: $(docker image inspect -f '{{.Size}}' "$tag") bytes"

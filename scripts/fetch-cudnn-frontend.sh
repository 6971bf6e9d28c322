#!/usr/bin/env bash
# Fetches NVIDIA's cudnn-frontend headers (header-only C++ over the cuDNN library; MIT licence)
# into $BUILD_DIR/_deps/cudnn_frontend/include: the graph API that builds cuDNN's fused flash
# attention (kernels/attention/attention_cudnn.cc). The headers ship in the PyPI wheel
# nvidia-cudnn-frontend, pinned here by version and sha256, downloaded by the pip of a bare
# virtual environment ($BUILD_DIR/_deps/pip; nothing installed into it). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
VERSION=1.32.0
WHEEL=nvidia_cudnn_frontend-$VERSION-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
SHA256=8b354a8e550c083eb247f1eb39a7d69a4a269075f5a01e4fcbd2531680b17239
DEST=$BUILD_DIR/_deps/cudnn_frontend
if [[ -f $DEST/.version && $(cat "$DEST/.version") == "$VERSION" ]]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PIP_ENV=$BUILD_DIR/_deps/pip
[[ -x $PIP_ENV/bin/pip ]] || python3 -m venv "$PIP_ENV"
"$PIP_ENV/bin/pip" download --disable-pip-version-check -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$VERSION"
echo "$SHA256  $tmp/$WHEEL" | sha256sum -c --quiet
rm -rf "$DEST" && mkdir -p "$DEST"
python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('include/')])" "$tmp/$WHEEL" "$DEST"
echo "$VERSION" > "$DEST/.version"
echo "fetch-cudnn-frontend: $DEST/include (cudnn-frontend $VERSION)"

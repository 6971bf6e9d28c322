#!/usr/bin/env bash
# The Python used by the end-to-end tests and benchmarks (an independent grpcio client, the Hugging
# Face `tokenizers` reference, transformers without torch for the export check, TensorBoard's
# event reader): a virtual environment at $BUILD_DIR/pyenv with pinned packages.
# Idempotent: does nothing when the environment already has them.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ENV=$BUILD_DIR/pyenv
PINS="grpcio==1.85.3 grpcio-tools==1.85.1 protobuf==7.36.2 tokenizers==0.23.3 kubernetes-validate==1.37.0 PyYAML==6.0.4 transformers==5.24.0 Jinja2==3.1.6 tensorboard==2.21.0"
STAMP=$ENV/.pins
if [[ -f $STAMP && $(cat "$STAMP") == "$PINS" ]]; then exit 0; fi
python3 -m venv "$ENV"
"$ENV/bin/pip" install -q --disable-pip-version-check $PINS
echo "$PINS" > "$STAMP"
echo "python-env: $ENV ($PINS)"

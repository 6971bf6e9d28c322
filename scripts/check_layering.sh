#!/usr/bin/env bash
# Layering guard: kernels/ includes nothing from runtime/ or daemon/, runtime/
# includes nothing from daemon/, and neither links protobuf or gRPC headers.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
if grep -rnE '#include "(runtime|daemon|proto)/' kernels/; then echo "kernels/ must not include runtime/, daemon/ or proto/"; bad=1; fi
if grep -rnE '#include "(daemon|proto)/|#include [<"](grpc|google/protobuf|yaml-cpp)' runtime/; then
  echo "runtime/ must not include daemon/, proto/, gRPC, protobuf or yaml-cpp"; bad=1
fi
exit $bad

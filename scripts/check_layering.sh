#!/usr/bin/env bash
# Layering guard: kernels/ includes nothing from runtime/ or daemon/, runtime/ includes nothing
# from daemon/, and neither links protobuf or gRPC headers. Inside runtime/ the folders form one
# order (a folder includes only folders before it), so no two of them include each other:
#   base, tensor, device, checkpoint, model, data, dist, optim, train
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
if grep -rnE '#include "(runtime|daemon|proto)/' kernels/; then echo "kernels/ must not include runtime/, daemon/ or proto/"; bad=1; fi
if grep -rnE '#include "(daemon|proto)/|#include [<"](grpc|google/protobuf|yaml-cpp)' runtime/; then
  echo "runtime/ must not include daemon/, proto/, gRPC, protobuf or yaml-cpp"; bad=1
fi
order=(base tensor device checkpoint model data dist optim train)
for ((i = 0; i < ${#order[@]}; i++)); do
  later=("${order[@]:i+1}")
  (( ${#later[@]} )) || continue
  pattern="#include \"runtime/($(IFS='|'; echo "${later[*]}"))/"
  if grep -rnE "$pattern" "runtime/${order[i]}/"; then
    echo "runtime/${order[i]}/ must not include a folder after it in: ${order[*]}"; bad=1
  fi
done
for d in runtime/*/; do
  name=$(basename "$d")
  [[ " ${order[*]} " == *" $name "* ]] || { echo "runtime/$name/ is not in the layering order"; bad=1; }
done
exit $bad

#!/usr/bin/env bash
# Layering guard: kernels/ includes nothing from runtime/ or daemon/, runtime/ includes nothing
# from daemon/, and neither links protobuf or gRPC headers. Inside runtime/ and inside daemon/ the
# folders form one order (a folder includes only folders before it), so no two of them include
# each other:
#   runtime: base, tensor, device, checkpoint, batch, model, data, distributed, optim, train
#   daemon:  (its root files: auth, command_line, grpc_status, random_hex), store, config, jobs,
#            rank, agents, service, cli; deltatuned_main.cc, which puts the daemon together,
#            includes any
set -euo pipefail
cd "$(dirname "$0")/../.."
bad=0
if grep -rnE '#include "(runtime|daemon|proto)/' kernels/; then echo "kernels/ must not include runtime/, daemon/ or proto/"; bad=1; fi
if grep -rnE '#include "(daemon|proto)/|#include [<"](grpc|google/protobuf|yaml-cpp)' runtime/; then
  echo "runtime/ must not include daemon/, proto/, gRPC, protobuf or yaml-cpp"; bad=1
fi
# check_order ROOT FOLDER...: each ROOT/FOLDER includes only folders before it, and every folder
# of ROOT is in the list.
check_order() {
  local root=$1; shift
  local order=("$@")
  for ((i = 0; i < ${#order[@]}; i++)); do
    local later=("${order[@]:i+1}")
    (( ${#later[@]} )) || continue
    local pattern="#include \"$root/($(IFS='|'; echo "${later[*]}"))/"
    if grep -rnE "$pattern" "$root/${order[i]}/"; then
      echo "$root/${order[i]}/ must not include a folder after it in: ${order[*]}"; bad=1
    fi
  done
  for d in "$root"/*/; do
    local name
    name=$(basename "$d")
    [[ " ${order[*]} " == *" $name "* ]] || { echo "$root/$name/ is not in the layering order"; bad=1; }
  done
}
check_order runtime base tensor device checkpoint batch model data distributed optim train
dorder=(store config jobs rank agents service cli)
check_order daemon "${dorder[@]}"
all="#include \"daemon/($(IFS='|'; echo "${dorder[*]}"))/"
for f in daemon/*.cc daemon/*.h; do
  [[ $f == daemon/deltatuned_main.cc ]] && continue
  if grep -nE "$all" "$f" /dev/null; then echo "$f (daemon/'s root) must not include its folders"; bad=1; fi
done
exit $bad

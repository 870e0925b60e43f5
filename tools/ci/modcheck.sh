#!/usr/bin/env bash
# Every module of the workspace stands alone: with go.work switched off
# (siblings come through the replace directives of its go.mod) it builds,
# vets, and its go.mod and go.sum are tidy (go mod tidy -diff prints what
# tidy would change and exits non-zero). Checks every module, names each
# that fails, and fails if any did.
set -uo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
root=$PWD
failed=()
for dir in $($GO list -m -f '{{.Dir}}'); do
  mod=${dir#"$root"/}
  if ! out=$(cd "$dir" && GOWORK=off $GO build ./... 2>&1 && GOWORK=off $GO vet ./... 2>&1); then
    echo "modcheck: $mod: does not build or vet on its own (GOWORK=off):"
    echo "$out" | sed 's/^/  /'
    failed+=("$mod")
    continue
  fi
  if ! out=$(cd "$dir" && GOWORK=off $GO mod tidy -diff 2>&1); then
    echo "modcheck: $mod: go.mod/go.sum not tidy (run: cd $mod && GOWORK=off go mod tidy):"
    echo "$out" | sed 's/^/  /'
    failed+=("$mod")
    continue
  fi
  echo "modcheck: $mod ok"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "modcheck: failed: ${failed[*]}"
  exit 1
fi

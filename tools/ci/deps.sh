#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: tmux for the terminal tests.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
need=()
command -v tmux >/dev/null 2>&1 || need+=(tmux)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: tmux for the terminal tests,
# Node.js and the JavaScript agent's npm packages for the outside-client
# test, and for the doc test the nats CLI (the docs show nats commands),
# python3 and pgrep.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# The doc test: AGENTS.md quotes a skill as JSON with python3; the test's
# per-command time limit uses pgrep.
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v pgrep >/dev/null 2>&1 || need+=(procps)
# The desktop bridge's tests (tools/bridge/desktop): a real X server, a
# session bus, the dunst notification daemon, notify-send, Zenity, xdotool
# to answer, ImageMagick's import for the screenshots, gdbus to ask the
# daemon what it can show.
command -v Xvfb >/dev/null 2>&1 || need+=(xvfb)
command -v dbus-daemon >/dev/null 2>&1 || need+=(dbus)
command -v dunst >/dev/null 2>&1 || need+=(dunst)
command -v notify-send >/dev/null 2>&1 || need+=(libnotify-bin)
command -v zenity >/dev/null 2>&1 || need+=(zenity)
command -v xdotool >/dev/null 2>&1 || need+=(xdotool)
command -v import >/dev/null 2>&1 || need+=(imagemagick)
command -v gdbus >/dev/null 2>&1 || need+=(libglib2.0-bin)
# The web console's tests (tools/console) drive Debian's Chromium headless
# (chromedp, from the Go module proxy).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The JavaScript agent (examples/agent-js) runs against heed in the
# conformance tests; install exactly what its lock file names.
agent=examples/agent-js
if [ ! -d "$agent/node_modules/@nats-io/transport-node" ] || [ "$agent/package-lock.json" -nt "$agent/node_modules/.package-lock.json" ]; then
  echo "installing the JavaScript agent's packages (npm ci)"
  npm ci --prefix "$agent" --no-audit --no-fund --loglevel=error
fi
# The MCP Inspector, whose CLI mode drives heed mcp (tools/heed,
# TestMCPWithTheInspector); exactly what its lock file names.
insp=tools/mcp/testdata/inspector
if [ ! -x "$insp/node_modules/.bin/mcp-inspector" ] || [ "$insp/package-lock.json" -nt "$insp/node_modules/.package-lock.json" ]; then
  echo "installing the MCP Inspector (npm ci)"
  npm ci --prefix "$insp" --no-audit --no-fund --loglevel=error
fi
# The doc test (tools/heed, TestDocsCommands) runs the nats commands the
# docs show; the nats CLI comes through the Go module proxy.
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
if ! command -v nats >/dev/null 2>&1 && [ ! -x "$gobin/nats" ]; then
  echo "installing the nats CLI (go install github.com/nats-io/natscli/nats@v0.5.1)"
  go install github.com/nats-io/natscli/nats@v0.5.1
fi

#!/usr/bin/env bash
# heed's local 3-node JetStream cluster on loopback ports, with every heed
# service as its own process: for tests, demos and the chaos suite
# (docs/PRODUCTION.md). Not for production as it is: see docs/PRODUCTION.md,
# "A production cluster".
#
#   deploy/cluster/local.sh start            # the three nodes (client ports 4231-4233)
#   deploy/cluster/local.sh services         # every service, --replicas 3, one process each
#   deploy/cluster/local.sh status
#   deploy/cluster/local.sh kill n2          # kill -9 one node (or a service: kill runner)
#   deploy/cluster/local.sh restart n2       # start it again
#   deploy/cluster/local.sh stop             # services, then nodes (SIGTERM)
#   deploy/cluster/local.sh clean            # stop and remove the data
#
# State (pids, logs, JetStream data) is in $HEED_CLUSTER_DIR (default
# .heed-cluster in the repository). nats-server is built from the version
# heed embeds into bin/nats-server unless $NATS_SERVER names one; the
# services are bin/heed-* (make build).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${HEED_CLUSTER_DIR:-$root/.heed-cluster}
nats_server=${NATS_SERVER:-$root/bin/nats-server}
tools=${HEED_TOOLS:-$root/skills/tools.yaml}
url="nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233"
nodes=(n1 n2 n3)
services=(indexer learner confirm-router runner healer escalator changesets)

alive() { [[ -f "$dir/$1.pid" ]] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

ready() { # node: routed, JetStream up with a meta leader (the full health check)
	local n=${1#n}
	curl -fsS "http://127.0.0.1:823$n/healthz" >/dev/null 2>&1
}

start_node() {
	local name=$1 n=${1#n}
	alive "$name" && return 0
	mkdir -p "$dir"
	(cd "$dir" && exec "$nats_server" -c "$here/node-$n.conf" >>"$dir/$name.log" 2>&1) &
	echo $! >"$dir/$name.pid"
}

start_service() {
	local svc=$1
	alive "$svc" && return 0
	local bin="$root/bin/heed-$svc"
	[[ -x $bin ]] || { echo "local.sh: $bin is missing (make build)" >&2; exit 1; }
	local extra=()
	case $svc in
	runner | healer | changesets) extra=(--tools "$tools") ;;
	esac
	"$bin" --nats-url "$url" --replicas 3 "${extra[@]}" ${HEED_SERVICE_ARGS:-} >>"$dir/$svc.log" 2>&1 &
	echo $! >"$dir/$svc.pid"
}

wait_ready() {
	for _ in $(seq 1 150); do
		local ok=1
		for name in "${nodes[@]}"; do
			alive "$name" && ready "$name" || ok=0
		done
		((ok)) && return 0
		sleep 0.2
	done
	echo "local.sh: the cluster did not become ready in 30 s; logs in $dir" >&2
	exit 1
}

stop_one() {
	local name=$1 sig=${2:-TERM}
	alive "$name" || { rm -f "$dir/$name.pid"; return 0; }
	local pid
	pid=$(cat "$dir/$name.pid")
	kill -s "$sig" "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
	rm -f "$dir/$name.pid"
}

case ${1:-help} in
start)
	if [[ ! -x $nats_server ]]; then
		echo "local.sh: building nats-server into $nats_server"
		(cd "$root/events" && go build -o "$nats_server" github.com/nats-io/nats-server/v2)
	fi
	for name in "${nodes[@]}"; do start_node "$name"; done
	wait_ready
	echo "heed cluster: 3 nodes ready; data and logs in $dir"
	echo "export HEED_NATS_URL=$url"
	;;
services)
	wait_ready
	for svc in "${services[@]}"; do start_service "$svc"; done
	echo "heed cluster: services started (${services[*]}); logs in $dir/<service>.log"
	;;
status)
	for name in "${nodes[@]}" "${services[@]}"; do
		if alive "$name"; then state="running (pid $(cat "$dir/$name.pid"))"; else state="stopped"; fi
		printf '%-15s %s\n' "$name" "$state"
	done
	;;
kill)
	[[ -n ${2:-} ]] || { echo "usage: local.sh kill NODE-OR-SERVICE" >&2; exit 2; }
	stop_one "$2" KILL
	echo "killed $2"
	;;
restart)
	[[ -n ${2:-} ]] || { echo "usage: local.sh restart NODE-OR-SERVICE" >&2; exit 2; }
	if [[ " ${nodes[*]} " == *" $2 "* ]]; then start_node "$2"; else start_service "$2"; fi
	echo "started $2"
	;;
stop)
	for svc in "${services[@]}"; do stop_one "$svc"; done
	for name in "${nodes[@]}"; do stop_one "$name"; done
	echo "heed cluster: stopped"
	;;
clean)
	"$0" stop
	rm -rf "$dir"
	;;
*)
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
	[[ ${1:-help} == help ]] || exit 2
	;;
esac

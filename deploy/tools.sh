#!/usr/bin/env bash
# tools.sh NAME: installs one tool that make test's deploy and spec checks
# need, once per machine, and prints the path to run it by. The tools live
# in $STOCKGUARD_TOOLS_DIR (default /tmp/stockguard-tools), outside the
# stack's directory so that `make stack-down` does not throw them away.
#   redocly   @redocly/cli from npm (the OpenAPI linter); Node.js and npm
#             from Debian's packages when there is no npm
#   helm      helm built from its Go module with go install
#   promtool  from Debian's prometheus package, installed without starting
#             the Prometheus server it ships
set -euo pipefail

TOOLS_DIR=${STOCKGUARD_TOOLS_DIR:-/tmp/stockguard-tools}
# 1.34.20 runs on Debian 12's Node.js 18.20 (its engines: node >=18.17);
# 2.x asks for Node 20.19 or later. 1.34.21 does not install from the
# registry here.
REDOCLY_VERSION=1.34.20
REDOCLY_NODE_MIN=18.17
HELM_VERSION=v3.22.0

log() { printf 'tools.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }


# ensure_node installs Debian's nodejs and npm when npm is missing (a
# NodeSource nodejs brings its own npm), then checks that node is new enough.
ensure_node() {
	if ! type -P npm >/dev/null; then
		[[ $(id -u) == 0 ]] || die "npm is missing and installing it needs root: apt-get install nodejs npm"
		log "installing Debian's nodejs and npm"
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm >&2; then
			apt-get update >&2
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm >&2
		fi
	fi
	local have
	have=$(node -p 'process.versions.node' 2>/dev/null) || die "npm is there but node does not run"
	[[ $(printf '%s\n' "$REDOCLY_NODE_MIN" "$have" | sort -V | head -n 1) == "$REDOCLY_NODE_MIN" ]] ||
		die "@redocly/cli@$REDOCLY_VERSION needs Node.js $REDOCLY_NODE_MIN or later; node is $have"
}

install_redocly() {
	local dir=$TOOLS_DIR/redocly-$REDOCLY_VERSION bin
	bin=$dir/node_modules/.bin/redocly
	if [[ ! -x $bin ]]; then
		ensure_node
		log "installing @redocly/cli@$REDOCLY_VERSION into $dir"
		npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@redocly/cli@$REDOCLY_VERSION" >&2
	fi
	echo "$bin"
}

install_helm() {
	local dir=$TOOLS_DIR/helm-$HELM_VERSION
	if [[ ! -x $dir/helm ]]; then
		log "building helm $HELM_VERSION into $dir (a few minutes, once)"
		GOBIN=$dir GOFLAGS=-trimpath go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
	fi
	echo "$dir/helm"
}

# restore_policy puts back the policy-rc.d saved at $2 (empty: there was
# none, so the one at $1 is removed).
restore_policy() {
	if [[ -n $2 ]]; then mv -f "$2" "$1"; else rm -f "$1"; fi
}

install_promtool() {
	if ! type -P promtool >/dev/null; then
		[[ $(id -u) == 0 ]] || die "promtool is missing and installing it needs root: apt-get install prometheus"
		log "installing Debian's prometheus package for promtool (its service is not started)"
		local policy=/usr/sbin/policy-rc.d saved=""
		# policy-rc.d exiting 101 forbids every service start during the
		# install; an existing policy is put back afterwards. The EXIT trap
		# (a failed install) gets the paths expanded now: it runs after
		# this function's locals are gone, where set -u would stop it
		# before it put anything back.
		if [[ -e $policy ]]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
		# shellcheck disable=SC2064
		trap "restore_policy $(printf '%q %q' "$policy" "$saved")" EXIT
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2; then
			apt-get update >&2
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2
		fi
		restore_policy "$policy" "$saved"
		trap - EXIT
		# Other servers of the stack may start meanwhile: look for the
		# package's own server only.
		if ss -Hltnp 2>/dev/null | grep -F '"prometheus"'; then
			die "the prometheus install started a Prometheus server (above); stop it by its PID"
		fi
	fi
	type -P promtool
}

case ${1:-} in
redocly | helm | promtool)
	# Several recipes may ask at once: one installer of each tool at a time.
	mkdir -p "$TOOLS_DIR"
	exec 9>"$TOOLS_DIR/.$1.lock"
	flock -w 900 9 || die "another tools.sh holds $TOOLS_DIR/.$1.lock"
	"install_$1"
	;;
*) die "usage: tools.sh redocly|helm|promtool" ;;
esac

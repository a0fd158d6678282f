#!/usr/bin/env bash
# Local stack for stockguard: five independent Redis masters, a three-node
# ZooKeeper ensemble, a three-member etcd cluster and a PostgreSQL cluster, all
# on 127.0.0.1, all started by hand from Debian's packages (never through
# systemd or service scripts).
#
#   eval "$(scripts/stack.sh up)"   start what is not running, print env lines;
#                                   needs root unless all of it runs already
#   scripts/stack.sh status         one line per server; non-zero if any is down
#   scripts/stack.sh down [--purge] stop what up started (by PID); --purge also
#                                   removes the scratch dir
#
# stdout of `up` carries only `export NAME=value` lines so that eval works;
# everything else goes to stderr. STOCKGUARD_STACK_DIR must be new, empty, or
# a directory that `up` made (it holds the marker file .stockguard-stack).
set -euo pipefail

STACK_DIR=${STOCKGUARD_STACK_DIR:-/tmp/stockguard-stack}
REDIS_PORTS=${STOCKGUARD_STACK_REDIS_PORTS:-6391,6392,6393,6394,6395}
ZK_PORTS=${STOCKGUARD_STACK_ZK_PORTS:-2181,2182,2183}
ZK_QUORUM_PORTS=${STOCKGUARD_STACK_ZK_QUORUM_PORTS:-2881,2882,2883}
ZK_ELECTION_PORTS=${STOCKGUARD_STACK_ZK_ELECTION_PORTS:-3881,3882,3883}
# Lock parents are container znodes, which the servers reap once emptied,
# every checkIntervalMs (ZooKeeper's default, a minute: a shorter interval
# reaps parents between a key's uses, and each comes back at the cost of a
# reaper delete, a failed create and a create), and once never used for
# maxNeverUsedIntervalMs (a client that died between creating a parent and
# its node; ZooKeeper's default keeps such a parent forever).
ZK_CONTAINER_CHECK_MS=${STOCKGUARD_STACK_ZK_CONTAINER_CHECK_MS:-60000}
ZK_CONTAINER_NEVER_USED_MS=${STOCKGUARD_STACK_ZK_CONTAINER_NEVER_USED_MS:-60000}
ETCD_PORTS=${STOCKGUARD_STACK_ETCD_PORTS:-2379,2479,2579}
ETCD_PEER_PORTS=${STOCKGUARD_STACK_ETCD_PEER_PORTS:-2380,2480,2580}
PG_PORT=${STOCKGUARD_STACK_PG_PORT:-5433}
PG_DB=stockguard
WAIT_SECS=30
STOP_SECS=10
JAVA_DIR=/usr/share/java
ZK_CLASSPATH=$JAVA_DIR/zookeeper.jar:$JAVA_DIR/slf4j-log4j12.jar:$JAVA_DIR/log4j-1.2.jar
MARKER=.stockguard-stack

PG_ROOT=$STACK_DIR/pg
PG_DATA=$PG_ROOT/data
PG_RUN=$PG_ROOT/run
PG_LOG=$PG_ROOT/postgres.log

log() { printf 'stack: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
# need_root what: dies unless root, saying what needed it.
need_root() {
	((EUID == 0)) || die "$1 needs root: run as root (it installs packages and starts servers as their users)"
}

split_ports() { # name value -> fills the array named by $1
	local -n out=$1
	local p
	IFS=, read -r -a out <<<"$2"
	for p in "${out[@]}"; do
		[[ $p =~ ^[0-9]+$ ]] && ((p > 0 && p < 65536)) || die "bad port '$p' in '$2'"
	done
}
split_ports REDIS_PORT_LIST "$REDIS_PORTS"
split_ports ZK_PORT_LIST "$ZK_PORTS"
split_ports ZK_QUORUM_LIST "$ZK_QUORUM_PORTS"
split_ports ZK_ELECTION_LIST "$ZK_ELECTION_PORTS"
split_ports ETCD_PORT_LIST "$ETCD_PORTS"
split_ports ETCD_PEER_LIST "$ETCD_PEER_PORTS"
[[ $PG_PORT =~ ^[0-9]+$ ]] || die "bad postgres port '$PG_PORT'"
for ms in "$ZK_CONTAINER_CHECK_MS" "$ZK_CONTAINER_NEVER_USED_MS"; do
	# Passed to the JVM as -D values: digits only, at least a second.
	[[ $ms =~ ^[0-9]{1,10}$ ]] && ((ms >= 1000)) || die "bad ZooKeeper container interval '$ms' ms (want an integer ≥ 1000)"
done
((${#ZK_PORT_LIST[@]} == ${#ZK_QUORUM_LIST[@]} && ${#ZK_PORT_LIST[@]} == ${#ZK_ELECTION_LIST[@]})) ||
	die "ZooKeeper client, quorum and election port lists differ in length"
((${#ETCD_PORT_LIST[@]} == ${#ETCD_PEER_LIST[@]})) || die "etcd client and peer port lists differ in length"

join_addrs() { # port... -> 127.0.0.1:p1,127.0.0.1:p2
	local IFS=,
	local a=("${@/#/127.0.0.1:}")
	echo "${a[*]}"
}

tail_log() { # file -> last lines on stderr, to explain a failed start
	[[ -f $1 ]] || return 0
	log "last lines of $1:"
	tail -n 15 "$1" | sed 's/^/    /' >&2 || true
}

# --- processes ---------------------------------------------------------------

# alive_pid pidfile comm needle: prints the PID when the pidfile names a live
# (non-zombie) process whose command name and command line match. Checking the
# command line guards against a recycled PID after a reboot or container restart.
alive_pid() {
	local pidfile=$1 comm=$2 needle=$3 pid stat cmdline
	[[ -s $pidfile ]] || return 1
	read -r pid <"$pidfile" || true
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/stat ]] || return 1
	stat=$(<"/proc/$pid/stat") 2>/dev/null || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]] || return 1
	[[ $(<"/proc/$pid/comm") == "$comm" ]] 2>/dev/null || return 1
	cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) " || return 1
	[[ $cmdline == *"$needle"* ]] || return 1
	echo "$pid"
}

# --- probes (bash /dev/tcp: there is no nc) ----------------------------------

redis_ping() { # port
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'PING\r\n' >&3
		IFS= read -r -t 1 line <&3 || exit 1
		[[ $line == +PONG* ]]
	) 2>/dev/null
}

zk_cmd() { # port word -> the four-letter-word answer on stdout
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf '%s' "$2" >&3
		while IFS= read -r -t 1 line <&3; do printf '%s\n' "$line"; done
		[[ -n ${line:-} ]] && printf '%s\n' "$line"
		true
	) 2>/dev/null
}

zk_mode() { # port -> leader|follower|standalone (only once a quorum exists)
	local out
	out=$(zk_cmd "$1" srvr) || return 1
	out=$(sed -n 's/^Mode: //p' <<<"$out")
	[[ $out == leader || $out == follower || $out == standalone ]] || return 1
	echo "$out"
}

# etcd_http port method path [body] -> the response body on stdout. etcd's
# gRPC gateway answers JSON over plain HTTP/1.1 on the client port.
etcd_http() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		local body=${4:-}
		printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
			"$2" "$3" "${#body}" "$body" >&3
		local line status=""
		IFS= read -r -t 1 status <&3 || exit 1
		[[ $status == "HTTP/1.1 200"* ]] || exit 1
		while IFS= read -r -t 1 line <&3 && [[ $line != $'\r' ]]; do :; done
		line=""
		IFS= read -r -t 1 line <&3 || true
		printf '%s\n' "$line"
	) 2>/dev/null
}

# etcd_role port -> leader|follower, only while the member serves (its
# /health says true, which needs a leader) and the cluster has a leader.
etcd_role() {
	local out me leader
	[[ $(etcd_http "$1" GET /health) == *'"health":"true"'* ]] || return 1
	out=$(etcd_http "$1" POST /v3/maintenance/status '{}') || return 1
	me=$(sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p' <<<"$out")
	leader=$(sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p' <<<"$out")
	[[ -n $me && -n $leader && $leader != 0 ]] || return 1
	if [[ $me == "$leader" ]]; then echo leader; else echo follower; fi
}

pg_ready() {
	"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 1 >/dev/null 2>&1
}

# --- packages ----------------------------------------------------------------

find_pg_bin() {
	local want="" d best=""
	# An existing cluster only starts with the major version that created it.
	[[ -s $PG_DATA/PG_VERSION ]] && want=$(<"$PG_DATA/PG_VERSION")
	if [[ -n $want && -x /usr/lib/postgresql/$want/bin/postgres ]]; then
		echo "/usr/lib/postgresql/$want/bin"
		return 0
	fi
	while read -r d; do
		if [[ -x $d/postgres && -x $d/initdb && -x $d/pg_ctl && -x $d/psql && -x $d/pg_isready ]]; then
			best=$d
		fi
	done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
	[[ -n $best ]] || return 1
	echo "$best"
}

# dpkg_locked: true while apt or dpkg holds one of their locks (read from
# /proc/locks, because dpkg's fcntl locks are invisible to flock(1)).
dpkg_locked() {
	local f ino
	for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock; do
		[[ -e $f ]] || continue
		ino=$(stat -c %i "$f")
		if awk -v ino="$ino" '{ n = split($(NF-2), a, ":"); if (a[n] == ino) found = 1 } END { exit !found }' /proc/locks; then
			return 0
		fi
	done
	return 1
}

wait_dpkg_lock() {
	local i
	for ((i = 0; i < 600; i++)); do
		dpkg_locked || return 0
		((i % 30 == 0)) && log "apt/dpkg is busy (another install is running); waiting for its lock"
		sleep 1
	done
	die "apt/dpkg lock still held after 600 s; finish or stop the other apt-get, then re-run"
}

POLICY_CREATED=0
cleanup_policy() {
	if ((POLICY_CREATED)); then rm -f /usr/sbin/policy-rc.d; fi
}

# SERVER_UNITS: the services that the server packages `up` installs enable,
# by package. The stack never uses them: it starts its own servers.
declare -A SERVER_UNITS=([redis-server]=redis-server.service [etcd-server]=etcd.service [postgresql-common]=postgresql.service)
# MASKED_UNITS: those of them that, started at all, would take the stack's
# ports with their package defaults (Debian's etcd listens on
# 127.0.0.1:2379/2380, etcd1's).
MASKED_UNITS=(etcd.service)

# pkg_installed pkg: whether dpkg has pkg installed.
pkg_installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }

systemd_running() { [[ -d /run/systemd/system ]]; }

# quiet_units pkg...: disables the services of server packages this run of
# the script has just installed (the caller names only those). policy-rc.d
# kept them from starting during the install, but their postinst left them
# enabled, so the machine's next boot would start Debian's etcd on etcd1's
# ports, redis-server and postgresql. Those in MASKED_UNITS are masked too,
# so that nothing else starts them on the stack's ports either. Nothing is
# stopped (no --now): the script started none of them, and a service that
# runs is someone else's. Without systemd nothing starts them at boot.
# Disabling and masking twice changes nothing.
quiet_units() {
	systemd_running || return 0
	local pkg unit
	for pkg in "$@"; do
		unit=${SERVER_UNITS[$pkg]:-}
		[[ -n $unit ]] || continue
		log "systemctl disable $unit (installed by this script for the stack, which starts its own servers)"
		systemctl disable --quiet "$unit" >&2 || log "warning: systemctl disable $unit failed"
		if [[ " ${MASKED_UNITS[*]} " == *" $unit "* ]]; then
			log "systemctl mask $unit (its package defaults take the stack's ports)"
			systemctl mask --quiet "$unit" >&2 || log "warning: systemctl mask $unit failed"
		fi
	done
}

ensure_packages() {
	local pkgs=() fresh=() pkg
	command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
	command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
	# Not a server: the report test renders the HTML report in headless
	# Chromium, and a fresh CI machine has none. Fonts are only recommended.
	[[ -x /usr/bin/chromium ]] || pkgs+=(chromium fonts-liberation)
	# libzookeeper-java holds the jars and nothing else: the zookeeper package
	# would add init scripts we never use and the full (X11) default-jre.
	[[ -f $JAVA_DIR/zookeeper.jar ]] || pkgs+=(libzookeeper-java)
	[[ -f $JAVA_DIR/slf4j-log4j12.jar ]] || pkgs+=(libslf4j-java)
	[[ -f $JAVA_DIR/log4j-1.2.jar ]] || pkgs+=(liblog4j1.2-java)
	command -v etcd >/dev/null 2>&1 || pkgs+=(etcd-server)
	local need_pg=0
	find_pg_bin >/dev/null || need_pg=1
	((${#pkgs[@]} || need_pg)) || return 0

	need_root "installing the missing packages (${pkgs[*]}$( ((need_pg)) && echo " postgresql"))"
	export DEBIAN_FRONTEND=noninteractive
	# Without a policy-rc.d the packages' postinst would start redis-server,
	# etcd and postgresql through their service scripts; the stack starts its own.
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		POLICY_CREATED=1
		trap cleanup_policy EXIT
	fi
	wait_dpkg_lock
	log "apt-get update"
	apt-get -o DPkg::Lock::Timeout=120 update >&2 || die "apt-get update failed"
	if ((need_pg)); then
		if apt-cache show postgresql-15 >/dev/null 2>&1; then pkgs+=(postgresql-15); else pkgs+=(postgresql); fi
	fi
	wait_dpkg_lock
	for pkg in "${!SERVER_UNITS[@]}"; do
		pkg_installed "$pkg" || fresh+=("$pkg")
	done
	log "apt-get install ${pkgs[*]}"
	apt-get -o DPkg::Lock::Timeout=120 install -y --no-install-recommends "${pkgs[@]}" >&2 ||
		die "apt-get install ${pkgs[*]} failed"
	cleanup_policy
	POLICY_CREATED=0
	local installed=()
	for pkg in "${fresh[@]}"; do
		pkg_installed "$pkg" && installed+=("$pkg")
	done
	quiet_units "${installed[@]}"
	command -v redis-server >/dev/null 2>&1 || die "redis-server still missing after install"
	command -v java >/dev/null 2>&1 || die "java still missing after install"
	[[ -f $JAVA_DIR/zookeeper.jar ]] || die "$JAVA_DIR/zookeeper.jar still missing after install"
	command -v etcd >/dev/null 2>&1 || die "etcd still missing after install"
	find_pg_bin >/dev/null || die "PostgreSQL binaries still missing under /usr/lib/postgresql/*/bin"
}

# --- redis -------------------------------------------------------------------

redis_dir() { echo "$STACK_DIR/redis/$1"; }
# Redis rewrites its command line to "redis-server 127.0.0.1:PORT".
redis_pid() { alive_pid "$(redis_dir "$1")/redis.pid" redis-server ":$1 "; }

start_redis() { # port
	local port=$1 d pid
	d=$(redis_dir "$port")
	mkdir -p "$d"
	if pid=$(redis_pid "$port"); then
		log "redis 127.0.0.1:$port already running (pid $pid)"
		return 0
	fi
	need_root "starting redis 127.0.0.1:$port"
	rm -f "$d/redis.pid"
	log "starting redis 127.0.0.1:$port"
	STARTED+=("redis :$port")
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
		--daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" --dir "$d" \
		</dev/null >>"$d/redis.log" 2>&1 9>&- || {
		tail_log "$d/redis.log"
		die "redis-server on port $port did not start"
	}
}

wait_redis() { # port
	local port=$1 i d
	d=$(redis_dir "$port")
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		if redis_pid "$port" >/dev/null; then
			redis_ping "$port" && return 0
		elif ((i >= 30)); then
			# Redis writes its pidfile only after it has bound the port, so no
			# pidfile after 3 s means it exited (often: the port is taken).
			tail_log "$d/redis.log"
			die "redis-server on port $port exited; is the port used by another process?"
		fi
		sleep 0.1
	done
	tail_log "$d/redis.log"
	die "redis on 127.0.0.1:$port did not answer PING within ${WAIT_SECS}s"
}

# --- zookeeper ---------------------------------------------------------------

zk_dir() { echo "$STACK_DIR/zk/$1"; }
zk_pid() { alive_pid "$(zk_dir "$1")/zk.pid" java "$(zk_dir "$1")/zoo.cfg"; }

write_zk_config() { # id (1-based)
	local id=$1 d i
	d=$(zk_dir "$id")
	mkdir -p "$d/data"
	echo "$id" >"$d/data/myid"
	{
		echo "tickTime=200"
		echo "initLimit=10"
		echo "syncLimit=5"
		echo "dataDir=$d/data"
		echo "clientPort=${ZK_PORT_LIST[id - 1]}"
		echo "clientPortAddress=127.0.0.1"
		echo "minSessionTimeout=400"
		echo "maxSessionTimeout=20000"
		echo "maxClientCnxns=0"
		echo "admin.enableServer=false"
		echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons"
		# Load tests write many znodes; keep the scratch dir from growing forever.
		echo "autopurge.snapRetainCount=3"
		echo "autopurge.purgeInterval=1"
		echo "preAllocSize=16384"
		for ((i = 1; i <= ${#ZK_PORT_LIST[@]}; i++)); do
			echo "server.$i=127.0.0.1:${ZK_QUORUM_LIST[i - 1]}:${ZK_ELECTION_LIST[i - 1]}"
		done
	} >"$d/zoo.cfg"
	cat >"$d/log4j.properties" <<EOF
log4j.rootLogger=INFO, R
log4j.appender.R=org.apache.log4j.RollingFileAppender
log4j.appender.R.File=$d/zookeeper.log
log4j.appender.R.MaxFileSize=10MB
log4j.appender.R.MaxBackupIndex=2
log4j.appender.R.layout=org.apache.log4j.PatternLayout
log4j.appender.R.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] %-5p [%t:%C{1}@%L] - %m%n
EOF
}

start_zk() { # id (1-based)
	local id=$1 d pid
	d=$(zk_dir "$id")
	if pid=$(zk_pid "$id"); then
		log "zookeeper 127.0.0.1:${ZK_PORT_LIST[id - 1]} already running (pid $pid)"
		return 0
	fi
	need_root "starting zookeeper 127.0.0.1:${ZK_PORT_LIST[id - 1]}"
	rm -f "$d/zk.pid"
	write_zk_config "$id"
	log "starting zookeeper 127.0.0.1:${ZK_PORT_LIST[id - 1]} (myid $id)"
	STARTED+=("zookeeper :${ZK_PORT_LIST[id - 1]}")
	# setsid detaches the JVM from our session so that a Ctrl-C in the shell
	# that ran `up` does not take the ensemble down; the inner shell records
	# its own PID and execs java, so the pidfile names the JVM itself.
	# TieredStopAtLevel=1 (C1 only): on two cores shared with everything
	# else, C2's compiler threads still took a fifth of the JVMs' CPU
	# minutes into a load, while ZooKeeper's request pipeline, bound by
	# hand-offs between threads and fsync, gains nothing measurable from
	# C2's code (loadtest/BENCH.md, twenty-fourth session).
	# No socket I/O or commit worker pools (0 threads: the selector and the
	# commit processor threads do that work themselves): each pool was one
	# more thread hand-off, a futex wake and a context switch, for every
	# request, and most of the JVMs' CPU was switching, not ZooKeeper's work.
	# A hot SKU's lock cost 13–22 % less JVM CPU an order without them
	# (loadtest/BENCH.md, twenty-seventh session); the pools pay off with
	# many cores and thousands of connections, not with 2 cores and a few.
	setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' zk "$d/zk.pid" \
		java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:-UsePerfData -XX:TieredStopAtLevel=1 \
		-Djava.net.preferIPv4Stack=true \
		-Dzookeeper.nio.numWorkerThreads=0 -Dzookeeper.commitProcessor.numWorkerThreads=0 \
		-Dznode.container.checkIntervalMs="$ZK_CONTAINER_CHECK_MS" \
		-Dznode.container.maxNeverUsedIntervalMs="$ZK_CONTAINER_NEVER_USED_MS" \
		-Dzookeeper.log.dir="$d" \
		-Dlog4j.configuration="file:$d/log4j.properties" \
		-cp "$ZK_CLASSPATH" \
		org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" \
		</dev/null >>"$d/zk.out" 2>&1 9>&- &
}

wait_zk() {
	local i id n=${#ZK_PORT_LIST[@]} ready
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		ready=0
		for ((id = 1; id <= n; id++)); do
			if ! zk_pid "$id" >/dev/null; then
				# The JVM writes no pidfile of its own; give the launcher a moment.
				if ((i >= 20)); then
					tail_log "$(zk_dir "$id")/zk.out"
					tail_log "$(zk_dir "$id")/zookeeper.log"
					die "zookeeper node $id (port ${ZK_PORT_LIST[id - 1]}) exited"
				fi
				continue
			fi
			zk_mode "${ZK_PORT_LIST[id - 1]}" >/dev/null && ready=$((ready + 1))
		done
		((ready == n)) && return 0
		sleep 0.1
	done
	for ((id = 1; id <= n; id++)); do tail_log "$(zk_dir "$id")/zookeeper.log"; done
	die "zookeeper ensemble did not elect a leader within ${WAIT_SECS}s"
}

# --- etcd --------------------------------------------------------------------

etcd_dir() { echo "$STACK_DIR/etcd/$1"; }
etcd_pid() { alive_pid "$(etcd_dir "$1")/etcd.pid" etcd "--data-dir $(etcd_dir "$1")/data "; }

etcd_initial_cluster() {
	local i out=()
	for ((i = 1; i <= ${#ETCD_PORT_LIST[@]}; i++)); do
		out+=("etcd$i=http://127.0.0.1:${ETCD_PEER_LIST[i - 1]}")
	done
	local IFS=,
	echo "${out[*]}"
}

start_etcd() { # id (1-based)
	local id=$1 d pid client peer
	d=$(etcd_dir "$id")
	client=http://127.0.0.1:${ETCD_PORT_LIST[id - 1]}
	peer=http://127.0.0.1:${ETCD_PEER_LIST[id - 1]}
	mkdir -p "$d"
	if pid=$(etcd_pid "$id"); then
		log "etcd 127.0.0.1:${ETCD_PORT_LIST[id - 1]} already running (pid $pid)"
		return 0
	fi
	need_root "starting etcd 127.0.0.1:${ETCD_PORT_LIST[id - 1]}"
	rm -f "$d/etcd.pid"
	log "starting etcd 127.0.0.1:${ETCD_PORT_LIST[id - 1]} (member etcd$id)"
	STARTED+=("etcd :${ETCD_PORT_LIST[id - 1]}")
	# Loopback heartbeats every 50 ms and elections after 500 ms, like the
	# ensemble's 200 ms tick: a killed leader is replaced in about a second.
	# The --initial-* flags only matter on the first start; afterwards the
	# member reads the cluster from its data dir. Compaction keeps the
	# revisions that load tests create from filling the backend.
	setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' etcd "$d/etcd.pid" \
		etcd --name "etcd$id" --data-dir "$d/data" \
		--listen-client-urls "$client" --advertise-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
		--initial-cluster "$(etcd_initial_cluster)" --initial-cluster-token stockguard \
		--initial-cluster-state new \
		--heartbeat-interval 50 --election-timeout 500 \
		--auto-compaction-mode periodic --auto-compaction-retention 5m \
		--logger zap --log-outputs stderr \
		</dev/null >>"$d/etcd.log" 2>&1 9>&- &
}

wait_etcd() {
	local i id n=${#ETCD_PORT_LIST[@]} ready leaders role
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		ready=0 leaders=0
		for ((id = 1; id <= n; id++)); do
			if ! etcd_pid "$id" >/dev/null; then
				if ((i >= 20)); then
					tail_log "$(etcd_dir "$id")/etcd.log"
					die "etcd member $id (port ${ETCD_PORT_LIST[id - 1]}) exited; is one of its ports used by another process?"
				fi
				continue
			fi
			if role=$(etcd_role "${ETCD_PORT_LIST[id - 1]}"); then
				ready=$((ready + 1))
				[[ $role == leader ]] && leaders=$((leaders + 1))
			fi
		done
		((ready == n && leaders == 1)) && return 0
		sleep 0.1
	done
	for ((id = 1; id <= n; id++)); do tail_log "$(etcd_dir "$id")/etcd.log"; done
	die "etcd cluster did not answer with a leader within ${WAIT_SECS}s"
}

# --- postgres ----------------------------------------------------------------

# pg_pid: the postmaster's PID. Its pidfile lies in pg/, which only the
# postgres user (and root) may enter, so another user finds the postmaster
# by its command line instead (/proc/PID/cmdline is world-readable), and can
# re-use a stack that root started. A backend the postmaster has just forked
# bears the same command line until it sets its title, so the postmaster is
# the match whose parent is not a match.
pg_pid() {
	if [[ -x $PG_ROOT ]]; then
		alive_pid "$PG_DATA/postmaster.pid" postgres "$PG_DATA"
		return
	fi
	local d stat ppid
	for d in /proc/[0-9]*; do
		pg_cluster_proc "$d" || continue
		stat=$(<"$d/stat") 2>/dev/null || continue
		stat=${stat##*) }
		read -r _ ppid _ <<<"$stat"
		pg_cluster_proc "/proc/$ppid" && continue
		echo "${d#/proc/}"
		return 0
	done
	return 1
}

# pg_cluster_proc /proc/PID: whether PID is a postgres started on $PG_DATA.
pg_cluster_proc() {
	local comm args
	read -r comm 2>/dev/null <"$1/comm" || return 1
	[[ $comm == postgres ]] || return 1
	mapfile -d '' -t args 2>/dev/null <"$1/cmdline" || return 1
	[[ " ${args[*]} " == *" -D $PG_DATA "* ]]
}

as_postgres() { (cd / && runuser -u postgres -- "$@"); }

start_pg() {
	local pid
	if pid=$(pg_pid); then
		log "postgres 127.0.0.1:$PG_PORT already running (pid $pid)"
		return 0
	fi
	need_root "starting postgres 127.0.0.1:$PG_PORT (initdb and postgres run as the postgres user via runuser)"
	id postgres >/dev/null 2>&1 ||
		useradd --system --user-group --no-create-home --home-dir /var/lib/postgresql --shell /usr/sbin/nologin postgres
	mkdir -p "$PG_ROOT"
	chown postgres: "$PG_ROOT"
	chmod 700 "$PG_ROOT"
	as_postgres test -w "$PG_ROOT" ||
		die "user postgres cannot write $PG_ROOT; choose a STOCKGUARD_STACK_DIR it can reach (e.g. under /tmp)"
	if [[ ! -s $PG_DATA/PG_VERSION ]]; then
		rm -rf "$PG_DATA"
		log "initdb $PG_DATA"
		as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
			--no-instructions >"$PG_ROOT/initdb.log" 2>&1 || {
			tail_log "$PG_ROOT/initdb.log"
			die "initdb failed"
		}
		echo "include 'stockguard.conf'" >>"$PG_DATA/postgresql.conf"
	fi
	# Rewritten on every start so that a changed STOCKGUARD_STACK_PG_PORT applies.
	as_postgres mkdir -p "$PG_RUN"
	cat >"$PG_DATA/stockguard.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_RUN'
max_connections = 300
EOF
	chown postgres: "$PG_DATA/stockguard.conf"
	# postgres itself refuses to start over a postmaster.pid it cannot prove
	# stale (a recycled PID in a container looks alive to it).
	rm -f "$PG_DATA/postmaster.pid"
	log "starting postgres 127.0.0.1:$PG_PORT"
	STARTED+=("postgres :$PG_PORT")
	as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -W -s start >&2 9>&- || {
		tail_log "$PG_LOG"
		die "pg_ctl start failed"
	}
}

wait_pg() {
	local i
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		if pg_pid >/dev/null; then
			pg_ready && break
		elif ((i >= 30)); then
			tail_log "$PG_LOG"
			die "postgres exited; is port $PG_PORT used by another process?"
		fi
		sleep 0.1
	done
	pg_ready || {
		tail_log "$PG_LOG"
		die "postgres on 127.0.0.1:$PG_PORT did not accept connections within ${WAIT_SECS}s"
	}
	local psql=("$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -tA)
	if [[ $(PGCONNECT_TIMEOUT=5 "${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'") != 1 ]]; then
		log "creating database $PG_DB"
		PGCONNECT_TIMEOUT=5 "${psql[@]}" -c "CREATE DATABASE $PG_DB" >&2 || die "CREATE DATABASE $PG_DB failed"
	fi
}

# --- commands ----------------------------------------------------------------

# Servers must not inherit fd 9 (every launch closes it with 9>&-): a daemon
# holding the lock file open would keep the lock forever.
lock_stack() {
	# flock needs only a read descriptor: a user who may not write root's
	# lock file still waits for root's stack.sh.
	if ! { exec 9>>"$STACK_DIR/.lock"; } 2>/dev/null; then
		exec 9<"$STACK_DIR/.lock" || die "cannot open $STACK_DIR/.lock"
	fi
	flock -w 120 9 || die "another stack.sh holds $STACK_DIR/.lock"
}

# claim_stack_dir makes STACK_DIR the stack's: a directory with the marker
# is one already, a new or empty one becomes one. Any other is refused
# before anything changes in it: claiming /tmp would strip its sticky bit,
# and a later `down --purge` would remove it.
claim_stack_dir() {
	if [[ ! -e $STACK_DIR/$MARKER ]]; then
		[[ ! -e $STACK_DIR || -d $STACK_DIR ]] || die "STOCKGUARD_STACK_DIR=$STACK_DIR is not a directory"
		if [[ -d $STACK_DIR && -n $(ls -A -- "$STACK_DIR") ]]; then
			die "STOCKGUARD_STACK_DIR=$STACK_DIR is not empty and has no $MARKER file, so it is not a stack directory; name a new or empty directory"
		fi
		need_root "creating the stack directory $STACK_DIR"
		mkdir -p -- "$STACK_DIR"
		touch -- "$STACK_DIR/$MARKER"
	fi
	# The postgres user must traverse it.
	if [[ $(stat -c %a -- "$STACK_DIR") != 755 ]]; then
		need_root "making $STACK_DIR traversable for the postgres user"
		chmod 755 -- "$STACK_DIR"
	fi
}

# shell_word value: value as one word of a shell command line, quoted only
# when it needs to be.
shell_word() {
	if [[ $1 =~ ^[[:alnum:]_./,:+=@%-]+$ ]]; then printf '%s' "$1"; else printf '%q' "$1"; fi
}

# STARTED: the servers this `up` has launched, for up_exit.
STARTED=()

# up_exit is the EXIT trap of `up`. A failed `up` leaves the servers it
# launched running: stopping them would take their state away from the
# logs that explain the failure. It names them and the command that stops
# them, with the settings that locate them (`down` finds servers by the
# pidfiles under STOCKGUARD_STACK_DIR and by their ports).
up_exit() {
	local rc=$? v env
	cleanup_policy
	((rc != 0 && ${#STARTED[@]})) || return 0
	env=("STOCKGUARD_STACK_DIR=$(shell_word "$STACK_DIR")")
	for v in $(compgen -v STOCKGUARD_STACK_); do
		[[ $v == STOCKGUARD_STACK_DIR ]] || env+=("$v=$(shell_word "${!v}")")
	done
	printf -v v '%s, ' "${STARTED[@]}"
	log "up failed; what it started still runs (${v%, }). Stop it with:"
	log "    ${env[*]} bash $(shell_word "$0") down"
}

cmd_up() {
	local port id
	claim_stack_dir
	ensure_packages
	# After ensure_packages, whose own EXIT trap removes its policy-rc.d
	# (up_exit does that too).
	trap up_exit EXIT
	PG_BIN=$(find_pg_bin)
	lock_stack

	# Start everything first and wait afterwards: the servers boot in parallel.
	for port in "${REDIS_PORT_LIST[@]}"; do start_redis "$port"; done
	for ((id = 1; id <= ${#ZK_PORT_LIST[@]}; id++)); do start_zk "$id"; done
	for ((id = 1; id <= ${#ETCD_PORT_LIST[@]}; id++)); do start_etcd "$id"; done
	start_pg

	for port in "${REDIS_PORT_LIST[@]}"; do wait_redis "$port"; done
	wait_zk
	wait_etcd
	wait_pg
	log "all servers answer"

	echo "export STOCKGUARD_REDIS_ADDRS=$(join_addrs "${REDIS_PORT_LIST[@]}")"
	echo "export STOCKGUARD_ZK_SERVERS=$(join_addrs "${ZK_PORT_LIST[@]}")"
	echo "export STOCKGUARD_ETCD_ENDPOINTS=$(join_addrs "${ETCD_PORT_LIST[@]}")"
	echo "export STOCKGUARD_DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"
}

cmd_status() {
	local port id pid down=0 mode
	PG_BIN=$(find_pg_bin 2>/dev/null) || PG_BIN=/nonexistent
	for port in "${REDIS_PORT_LIST[@]}"; do
		if pid=$(redis_pid "$port") && redis_ping "$port"; then
			echo "redis     127.0.0.1:$port up (pid $pid)"
		else
			echo "redis     127.0.0.1:$port DOWN"
			down=1
		fi
	done
	for ((id = 1; id <= ${#ZK_PORT_LIST[@]}; id++)); do
		port=${ZK_PORT_LIST[id - 1]}
		if pid=$(zk_pid "$id") && mode=$(zk_mode "$port"); then
			echo "zookeeper 127.0.0.1:$port up (pid $pid, $mode)"
		else
			echo "zookeeper 127.0.0.1:$port DOWN"
			down=1
		fi
	done
	for ((id = 1; id <= ${#ETCD_PORT_LIST[@]}; id++)); do
		port=${ETCD_PORT_LIST[id - 1]}
		if pid=$(etcd_pid "$id") && mode=$(etcd_role "$port"); then
			echo "etcd      127.0.0.1:$port up (pid $pid, $mode)"
		else
			echo "etcd      127.0.0.1:$port DOWN"
			down=1
		fi
	done
	if pid=$(pg_pid) && pg_ready; then
		echo "postgres  127.0.0.1:$PG_PORT up (pid $pid)"
	else
		echo "postgres  127.0.0.1:$PG_PORT DOWN"
		down=1
	fi
	return "$down"
}

# proc_start PID: the process's start time (clock ticks after boot, field 22
# of /proc/PID/stat), which tells it apart from a later process that gets
# its PID.
proc_start() {
	local stat fields
	{ stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
	read -r -a fields <<<"${stat##*) }"
	echo "${fields[19]}"
}

# same_proc PID START: whether PID is still the process that started at START.
same_proc() {
	local now
	now=$(proc_start "$1") || return 1
	[[ $now == "$2" ]]
}

# stop_signal SIG PID NAME: signals a server of the stack and notes it (in
# cmd_down's pids, starts and names) for the wait.
stop_signal() {
	local start
	start=$(proc_start "$2") || return 0 # gone already
	kill "-$1" "$2" || return 0
	pids+=("$2")
	starts+=("$start")
	names+=("$3")
}

cmd_down() {
	local purge=0 port id pid i
	[[ ${1:-} == --purge ]] && purge=1
	[[ -n ${1:-} && $purge == 0 ]] && die "usage: stack.sh down [--purge]"
	if [[ ! -d $STACK_DIR ]]; then
		log "nothing to stop: $STACK_DIR does not exist"
		return 0
	fi
	# The marker keeps a mistyped STOCKGUARD_STACK_DIR from having its
	# files signalled by PID, or with --purge the directory deleted.
	[[ -e $STACK_DIR/$MARKER ]] || die "$STACK_DIR has no $MARKER file, so it is not a stack directory; nothing stopped or removed"
	need_root "stopping the stack"
	lock_stack

	# Signal everything first, then wait: shutdowns overlap. Each server is
	# known by its PID and start time from then on: a PID freed by a server
	# that stopped may be another process's by the time the slowest one is
	# waited for, and must not be taken for it (or killed).
	local pids=() starts=() names=()
	for port in "${REDIS_PORT_LIST[@]}"; do
		if pid=$(redis_pid "$port"); then
			stop_signal TERM "$pid" "redis :$port"
		fi
	done
	for ((id = 1; id <= ${#ZK_PORT_LIST[@]}; id++)); do
		if pid=$(zk_pid "$id"); then
			stop_signal TERM "$pid" "zookeeper :${ZK_PORT_LIST[id - 1]}"
		fi
	done
	for ((id = 1; id <= ${#ETCD_PORT_LIST[@]}; id++)); do
		if pid=$(etcd_pid "$id"); then
			stop_signal TERM "$pid" "etcd :${ETCD_PORT_LIST[id - 1]}"
		fi
	done
	if pid=$(pg_pid); then
		# SIGINT is postgres' "fast" shutdown; SIGTERM ("smart") would wait for
		# every client to disconnect.
		stop_signal INT "$pid" "postgres :$PG_PORT"
	fi
	for ((i = 0; i < STOP_SECS * 10; i++)); do
		local left=0 j
		for ((j = 0; j < ${#pids[@]}; j++)); do
			same_proc "${pids[j]}" "${starts[j]}" && left=1
		done
		((left)) || break
		sleep 0.1
	done
	for ((i = 0; i < ${#pids[@]}; i++)); do
		if same_proc "${pids[i]}" "${starts[i]}"; then
			log "${names[i]} (pid ${pids[i]}) ignored the stop signal for ${STOP_SECS}s; SIGKILL"
			kill -KILL "${pids[i]}" 2>/dev/null || true
		else
			log "stopped ${names[i]} (pid ${pids[i]})"
		fi
	done
	for port in "${REDIS_PORT_LIST[@]}"; do rm -f "$(redis_dir "$port")/redis.pid"; done
	for ((id = 1; id <= ${#ZK_PORT_LIST[@]}; id++)); do rm -f "$(zk_dir "$id")/zk.pid"; done
	for ((id = 1; id <= ${#ETCD_PORT_LIST[@]}; id++)); do rm -f "$(etcd_dir "$id")/etcd.pid"; done
	((${#pids[@]})) || log "no running server found"

	if ((purge)); then
		rm -rf -- "$STACK_DIR"
		log "removed $STACK_DIR"
	fi
}

# Sourced (the tests call its functions), the script only defines them.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case ${1:-} in
up) cmd_up ;;
status) cmd_status ;;
down)
	shift
	cmd_down "$@"
	;;
*)
	echo "usage: $0 up|status|down [--purge]" >&2
	exit 2
	;;
esac

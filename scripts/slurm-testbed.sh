#!/usr/bin/env bash
# A real Slurm 22.05 test cluster on one machine (Debian 12, as root): its own munged, a hand-started
# MariaDB, slurmdbd, slurmctld and 4 slurmd (multiple-slurmd, nodes n1..n4) with 8 fake GPUs each.
# Everything (configs, state, logs, PID files, sockets) lives under $TESTBED_ROOT and every port is
# derived from $TESTBED_PORT_BASE, so several clusters run side by side. See docs/testbed.md.
#
#   slurm-testbed.sh install [--browser]   apt packages (idempotent; prometheus for the metrics test);
#                                          --browser adds chromium + driver
#   slurm-testbed.sh start [--fresh]       start what is not running; --fresh wipes state and database
#   slurm-testbed.sh stop [DAEMON...]      stop by PID file (all, or e.g. `stop slurmctld`)
#   slurm-testbed.sh status
#
# Ports (B = TESTBED_PORT_BASE): slurmctld B, slurmdbd B+1, MariaDB B+2, slurmd n1..n4 B+11..B+14.
set -euo pipefail

ROOT=${TESTBED_ROOT:-/tmp/autosched-testbed}
MARKER=$ROOT/.autosched-testbed   # holds the port base the root was last started with
# default port base: the one this root was started with, else 24000
BASE=${TESTBED_PORT_BASE:-$(tr -dc '0-9' 2>/dev/null <"$MARKER" || true)}
BASE=${BASE:-24000}
[[ $BASE =~ ^[0-9]+$ ]] && ((BASE > 0 && BASE + 19 < 65536)) || { echo "testbed: error: TESTBED_PORT_BASE=$BASE is not a port number" >&2; exit 1; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPLATES=$HERE/slurm
NODES=(n1 n2 n3 n4)
GPUS_PER_NODE=8
USERS=(alice bob carol)
STOP_GRACE=${TESTBED_STOP_GRACE:-15}     # seconds between SIGTERM and SIGKILL
# CPUs per GPU a job that asks for none gets (slurm.conf's DefCpuPerGPU), as a site sets it so that
# the job-size factor tells a 1-GPU job from an 8-GPU one; empty: unset, Slurm's one task of one CPU
DEF_CPU_PER_GPU=${TESTBED_DEF_CPU_PER_GPU:-}
[[ -z $DEF_CPU_PER_GPU || $DEF_CPU_PER_GPU == 1 ]] || { echo "testbed: error: TESTBED_DEF_CPU_PER_GPU=$DEF_CPU_PER_GPU: must be 1 or empty (a node has 8 CPUs for its 8 GPUs)" >&2; exit 1; }
READY_TIMEOUT=${TESTBED_READY_TIMEOUT:-60}

CTLD_PORT=$BASE
DBD_PORT=$((BASE + 1))
MYSQL_PORT=$((BASE + 2))
SLURMD_PORT_FIRST=$((BASE + 11))
SLURMD_PORT_LAST=$((BASE + 10 + ${#NODES[@]}))

ETC=$ROOT/etc
RUN=$ROOT/run
LOG=$ROOT/log
MYSQL_DIR=$ROOT/mysql
MUNGE_DIR=$ROOT/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MYSQL_SOCKET=$MYSQL_DIR/mysqld.sock
export SLURM_CONF=$ETC/slurm.conf

# Daemons in start order; stop goes the other way. Each has a PID file $RUN/NAME.pid.
DAEMONS=(munged mariadbd slurmdbd slurmctld "${NODES[@]/#/slurmd-}")

say() { printf '%s\n' "testbed: $*" >&2; }
die() { printf '%s\n' "testbed: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# --- processes -------------------------------------------------------------------------------------

# The process name a daemon's PID must have (guards against a reused PID).
comm_of() {
    case $1 in
        slurmd-*) echo slurmd ;;
        *) echo "$1" ;;
    esac
}

pid_of() { # NAME -> PID from its PID file, or nothing
    local f=$RUN/$1.pid
    [[ -s $f ]] && tr -dc '0-9' <"$f" || true
}

# Alive = exists, is not a zombie (PID 1 here reaps late, and kill -0 succeeds on zombies), and
# runs the expected program - or is still the launcher (setsid/setpriv) about to exec it: on a
# loaded machine the first check can come before the exec.
live_pid() { # PID: exists and is not a zombie
    local state
    [[ -n $1 && -r /proc/$1/status ]] || return 1
    state=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
    [[ $state != Z && $state != X && -n $state ]]
}

alive() { # PID NAME
    local pid=$1 name=$2 comm prog
    live_pid "$pid" || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    prog=$(comm_of "$name")
    [[ $comm == "$prog"* ]] && return 0
    [[ $comm == setsid || $comm == setpriv ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "/$prog "
}

running() { alive "$(pid_of "$1")" "$1"; }

logs_of() { # NAME -> its log files
    case $1 in
        munged) echo "$MUNGE_DIR/munged.log $LOG/munged.out" ;;
        mariadbd) echo "$MYSQL_DIR/mariadb.log $LOG/mariadbd.out" ;;
        slurmdbd) echo "$LOG/slurmdbd.log $LOG/slurmdbd.out" ;;
        slurmctld) echo "$LOG/slurmctld.log $LOG/slurmctld.out" ;;
        slurmd-*) echo "$LOG/slurmd-${1#slurmd-}.log $LOG/$1.out" ;;
    esac
}

fail_with_log() { # NAME MESSAGE: show the tail of the daemon's log (or its stderr), then fail
    local name=$1 msg=$2 f
    for f in $(logs_of "$name"); do
        [[ -s $f ]] || continue
        printf '%s\n' "--- last lines of $f" >&2
        tail -n 20 "$f" >&2
        break
    done
    die "$msg"
}

# Start a daemon in the foreground of its own session, so $! is its PID and it outlives this script.
# Return once the fork has exec'd (setsid, then the daemon): until then /proc shows a copy of this
# shell, which `alive` cannot tell from a daemon that exited, and on a loaded machine the first
# check after a launch came that early ("slurmctld exited during start-up", with no log yet).
launch() { # NAME COMMAND...
    local name=$1 pid shell i; shift
    setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 &
    pid=$!
    echo "$pid" >"$RUN/$name.pid"
    shell=$(readlink "/proc/$$/exe")
    for ((i = 0; i < 200; i++)); do
        [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$shell" ]] || return 0
        sleep 0.05
    done
}

wait_until() { # NAME TIMEOUT CHECK...: poll CHECK while the daemon lives
    local name=$1 limit=$2; shift 2
    local t0; t0=$(date +%s)
    while ! "$@" >/dev/null 2>&1; do
        running "$name" || fail_with_log "$name" "$name exited during start-up"
        (($(date +%s) - t0 < limit)) || fail_with_log "$name" "$name not ready after ${limit} s ($*)"
        sleep 0.1
    done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# --- rendering ------------------------------------------------------------------------------------

render() { # TEMPLATE DEST
    sed -e "s|@ROOT@|$ROOT|g" -e "s|@HOST@|$HOST|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
        -e "s|@DBD_PORT@|$DBD_PORT|g" -e "s|@MYSQL_PORT@|$MYSQL_PORT|g" \
        -e "s|@SLURMD_PORT_FIRST@|$SLURMD_PORT_FIRST|g" -e "s|@SLURMD_PORT_LAST@|$SLURMD_PORT_LAST|g" \
        -e "s|@MUNGE_SOCKET@|$MUNGE_SOCKET|g" \
        -e "s|@JOB_DEFAULTS@|${DEF_CPU_PER_GPU:+DefCpuPerGPU=$DEF_CPU_PER_GPU}|g" "$1" >"$2.tmp"
    mv "$2.tmp" "$2"
}

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (daemons switch to the slurm, mysql and munge users)"; }

need_binaries() {
    local b missing=()
    for b in munged mungekey mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd sacctmgr sinfo scontrol; do
        command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || missing+=("$b")
    done
    ((${#missing[@]} == 0)) || die "missing programs: ${missing[*]} (run: $0 install)"
}

check_host() {
    HOST=$(hostname -s)
    getent hosts "$HOST" >/dev/null || die "hostname '$HOST' does not resolve (add it to /etc/hosts)"
}

prepare_root() { # [fresh]
    local fresh=${1:-}
    if [[ -d $ROOT && -n $(ls -A "$ROOT") && ! -e $MARKER ]]; then
        die "$ROOT is not empty and is not a testbed root (no $MARKER): refusing to use it"
    fi
    if [[ -n $fresh && -d $ROOT ]]; then
        rm -rf --one-file-system "${ROOT:?}"/* "$MARKER"
    fi
    mkdir -p "$ROOT"
    chmod 755 "$ROOT"
    local was d
    was=$(tr -dc '0-9' 2>/dev/null <"$MARKER" || true)
    if [[ -n $was && $was != "$BASE" ]]; then
        for d in "${DAEMONS[@]}"; do
            running "$d" && die "$ROOT runs with port base $was ($d is up): stop it first or use TESTBED_PORT_BASE=$was"
        done
    fi
    echo "$BASE" >"$MARKER"
    mkdir -p "$ETC" "$RUN" "$LOG" "$ROOT/state/ctld" "$ROOT/fakedev" "$MYSQL_DIR" "$MUNGE_DIR"
    for n in "${NODES[@]}"; do mkdir -p "$ROOT/state/d/$n"; done
    chmod 755 "$ETC" "$RUN" "$LOG" "$ROOT/state" "$ROOT/fakedev"
    chown slurm:slurm "$ROOT/state/ctld" "$LOG" "$RUN"
    chown mysql:mysql "$MYSQL_DIR"
    install -d -o mysql -g mysql -m 700 "$MYSQL_DIR/tmp"
    chown munge:munge "$MUNGE_DIR"
    chmod 755 "$MUNGE_DIR"   # clients of every user connect to the socket inside
    for i in $(seq 0 $((GPUS_PER_NODE - 1))); do ln -sfn /dev/null "$ROOT/fakedev/nvidia$i"; done
    render "$TEMPLATES/slurm.conf.in" "$ETC/slurm.conf"
    render "$TEMPLATES/gres.conf.in" "$ETC/gres.conf"
    render "$TEMPLATES/slurmdbd.conf.in" "$ETC/slurmdbd.conf"
    chmod 644 "$ETC/slurm.conf" "$ETC/gres.conf"
    chown slurm:slurm "$ETC/slurmdbd.conf"
    chmod 600 "$ETC/slurmdbd.conf"
    # the live layer owns this file; keep what it wrote across a restart
    [[ -e $ETC/autosched.conf ]] || cp "$TEMPLATES/autosched.conf.in" "$ETC/autosched.conf"
    chmod 644 "$ETC/autosched.conf"
    write_env
}

write_env() {
    cat >"$ROOT/env.sh.tmp" <<EOF
# source this to talk to the testbed in $ROOT
export SLURM_CONF=$ETC/slurm.conf
export TESTBED_ROOT=$ROOT
export TESTBED_PORT_BASE=$BASE
EOF
    mv "$ROOT/env.sh.tmp" "$ROOT/env.sh"
}

# --- daemons ---------------------------------------------------------------------------------------

start_munged() {
    running munged && return 0
    if [[ ! -s $MUNGE_DIR/munge.key ]]; then
        setpriv --reuid=munge --regid=munge --init-groups mungekey --create --keyfile="$MUNGE_DIR/munge.key" \
            || die "mungekey could not create $MUNGE_DIR/munge.key"
    fi
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    launch munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" --seed-file="$MUNGE_DIR/munged.seed" \
        --log-file="$MUNGE_DIR/munged.log" --pid-file="$MUNGE_DIR/munged.pid" --num-threads=2
    wait_until munged 10 test -S "$MUNGE_SOCKET"
    wait_until munged 10 munge_ok
}

munge_ok() { munge --socket="$MUNGE_SOCKET" -n | unmunge --socket="$MUNGE_SOCKET"; }

mysql_cmd() { timeout 20 mariadb --no-defaults --socket="$MYSQL_SOCKET" -u root "$@"; }

start_mariadb() {
    running mariadbd && return 0
    local new= t; t=$(now)
    if [[ ! -d $MYSQL_DIR/data/mysql ]]; then
        new=1
        rm -rf "$MYSQL_DIR/data"
        # a private tmpdir: two bootstraps sharing /tmp removed each other's temporary tables
        install -d -o mysql -g mysql -m 700 "$MYSQL_DIR/tmp"
        timeout 120 mariadb-install-db --no-defaults --datadir="$MYSQL_DIR/data" --user=mysql --skip-test-db \
            --tmpdir="$MYSQL_DIR/tmp" \
            --auth-root-authentication-method=socket --innodb-log-file-size=16M >"$LOG/mariadb-install-db.out" 2>&1 \
            || { grep -i -m 20 -E 'error|fail|denied' "$LOG/mariadb-install-db.out" >&2 || tail -n 20 "$LOG/mariadb-install-db.out" >&2
                 die "mariadb-install-db failed (full output: $LOG/mariadb-install-db.out)"; }
        say "mariadb-install-db $(since "$t") s"
    fi
    launch mariadbd /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$MYSQL_DIR/data" \
        --socket="$MYSQL_SOCKET" --port="$MYSQL_PORT" --bind-address=127.0.0.1 --tmpdir="$MYSQL_DIR/tmp" \
        --pid-file="$MYSQL_DIR/mysqld.pid" --log-error="$MYSQL_DIR/mariadb.log" \
        --innodb-buffer-pool-size=256M --innodb-log-file-size=16M --innodb-lock-wait-timeout=900 \
        --skip-name-resolve --skip-log-bin --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0
    wait_until mariadbd 60 timeout 5 mariadb-admin --no-defaults --socket="$MYSQL_SOCKET" -u root ping
    if [[ -n $new ]]; then
        mysql_cmd -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
            || fail_with_log mariadbd "could not create the slurm database user"
    fi
}

sacctmgr_t() { timeout 20 sacctmgr "$@"; }

start_slurmdbd() {
    running slurmdbd && return 0
    launch slurmdbd /usr/sbin/slurmdbd -D
    wait_until slurmdbd 60 sacctmgr_t -n show cluster format=cluster
}

ensure_users() {
    local u
    for u in "${USERS[@]}"; do
        id -u "$u" >/dev/null 2>&1 && continue
        # another testbed may create the same user at the same moment: recheck before failing
        useradd -M -N -g users "$u" 2>/dev/null || id -u "$u" >/dev/null 2>&1 || die "useradd $u failed"
    done
}

setup_accounts() {
    if [[ -n $(sacctmgr_t -n -P show cluster format=cluster | grep -x testcluster) ]]; then
        return 0
    fi
    # One load file = one sacctmgr call; separate `add` calls cost ~1 s each.
    local f=$ROOT/etc/accounts.cfg
    cat >"$f" <<EOF
Cluster - 'testcluster'
Parent - 'root'
User - 'root':DefaultAccount='root':AdminLevel='Administrator'
Account - 'physics':Description='physics':Organization='physics':Fairshare=60
Account - 'chemistry':Description='chemistry':Organization='chemistry':Fairshare=40
Parent - 'physics'
$(for u in "${USERS[@]}"; do echo "User - '$u':DefaultAccount='physics'"; done)
Parent - 'chemistry'
$(for u in "${USERS[@]}"; do echo "User - '$u':DefaultAccount='physics'"; done)
EOF
    sacctmgr_t -i load file="$f" >"$LOG/sacctmgr-load.out" 2>&1 \
        || { tail -n 20 "$LOG/sacctmgr-load.out" >&2; fail_with_log slurmdbd "sacctmgr could not create cluster/accounts/users"; }
}

start_slurmctld() {
    running slurmctld && return 0
    launch slurmctld /usr/sbin/slurmctld -D
    wait_until slurmctld "$READY_TIMEOUT" timeout 5 scontrol ping
}

start_slurmd() {
    local n
    for n in "${NODES[@]}"; do
        running "slurmd-$n" && continue
        launch "slurmd-$n" /usr/sbin/slurmd -D -N "$n"
    done
}

# Ready = every node answers (not down/unknown/not responding). After --fresh that means idle.
nodes_ready() {
    local out bad
    # one line per node and partition: a node in two partitions is listed twice
    out=$(timeout 5 sinfo -h -N -o '%N %t') || return 1
    out=$(sort -u <<<"$out")
    [[ $(wc -l <<<"$out") -eq ${#NODES[@]} ]] || return 1
    bad=$(awk '$2 !~ /^(idle|alloc|mix|comp|resv|plnd)$/' <<<"$out")
    [[ -z $bad ]]
}

wait_nodes() {
    local t0 n; t0=$(date +%s)
    while ! nodes_ready; do
        running slurmctld || fail_with_log slurmctld "slurmctld exited while waiting for the nodes"
        for n in "${NODES[@]}"; do
            running "slurmd-$n" || fail_with_log "slurmd-$n" "slurmd -N $n exited during start-up"
        done
        if (($(date +%s) - t0 >= READY_TIMEOUT)); then
            timeout 5 sinfo -N -o '%N %t %E' >&2 || true
            fail_with_log slurmd-n1 "nodes not ready after ${READY_TIMEOUT} s"
        fi
        sleep 0.1
    done
}

check_ports() {
    local p name busy=()
    for name in "slurmctld:$CTLD_PORT" "slurmdbd:$DBD_PORT" "mariadbd:$MYSQL_PORT"; do
        p=${name#*:}
        running "${name%%:*}" && continue
        port_busy "$p" && busy+=("$p")
    done
    for i in "${!NODES[@]}"; do
        running "slurmd-${NODES[$i]}" && continue
        p=$((SLURMD_PORT_FIRST + i))
        port_busy "$p" && busy+=("$p")
    done
    ((${#busy[@]} == 0)) || die "ports in use on 127.0.0.1: ${busy[*]} (choose another TESTBED_PORT_BASE)"
}

cmd_start() {
    local fresh=
    for a in "$@"; do
        case $a in
            --fresh) fresh=1 ;;
            *) die "unknown option for start: $a" ;;
        esac
    done
    need_root
    need_binaries
    check_host
    local t0 t; t0=$(now)
    if [[ -n $fresh ]]; then
        cmd_stop >/dev/null
    fi
    check_ports
    prepare_root "$fresh"
    ensure_users
    trap 'say "start failed: daemons that did start are left running for inspection; stop them with: TESTBED_ROOT=$ROOT TESTBED_PORT_BASE=$BASE $0 stop"' EXIT
    t=$(now); start_munged; say "munged $(since "$t") s"
    t=$(now); start_mariadb; say "mariadbd $(since "$t") s"
    t=$(now); start_slurmdbd; say "slurmdbd $(since "$t") s"
    t=$(now); setup_accounts; say "accounts $(since "$t") s"
    t=$(now); start_slurmctld; say "slurmctld $(since "$t") s"
    t=$(now); start_slurmd; wait_nodes; say "slurmd x${#NODES[@]} ready $(since "$t") s"
    trap - EXIT
    say "cluster ready in $(since "$t0") s (root $ROOT, port base $BASE)"
    echo "export SLURM_CONF=$ETC/slurm.conf   # or: source $ROOT/env.sh"
}

# --- stop / status ---------------------------------------------------------------------------------

stop_group() { # NAME...: SIGTERM them together, wait, SIGKILL the ones left after STOP_GRACE s
    local name pid pids=() names=() t0
    for name in "$@"; do
        pid=$(pid_of "$name")
        if alive "$pid" "$name"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid"); names+=("$name")
        fi
    done
    ((${#pids[@]})) || return 0
    t0=$(date +%s)
    while :; do
        local left=()
        for i in "${!pids[@]}"; do alive "${pids[$i]}" "${names[$i]}" && left+=("$i"); done
        ((${#left[@]})) || break
        if (($(date +%s) - t0 >= STOP_GRACE)); then
            for i in "${left[@]}"; do
                say "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_GRACE} s: SIGKILL"
                kill -KILL "${pids[$i]}" 2>/dev/null || true
            done
            sleep 0.2
            break
        fi
        sleep 0.1
    done
    for name in "${names[@]}"; do rm -f "$RUN/$name.pid"; done
}

# Job steps of this cluster that outlived their slurmd (slurmstepd daemonizes; with
# proctrack/linuxproc nothing else ends it): found by the SLURM_CONF they inherited, plus every
# descendant (the job's own processes).
stray_steps() {
    local p roots=()
    for p in /proc/[0-9]*; do
        [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] && live_pid "${p#/proc/}" || continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_CONF=$ETC/slurm.conf" && roots+=("${p#/proc/}")
    done
    ((${#roots[@]})) || return 0
    # "pid ppid" of every process (comm in /proc/PID/stat may contain spaces: cut after its ')')
    for p in /proc/[0-9]*/stat; do
        sed -E 's/^([0-9]+) .*\) [A-Za-z] ([0-9]+) .*/\1 \2/' "$p" 2>/dev/null || true
    done | awk -v roots="${roots[*]}" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do { grew = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 } } while (grew)
            for (k in keep) print k
        }'
}

cancel_jobs() { # let slurmd end the jobs it runs, so no job step outlives the cluster
    running slurmctld || return 0
    local ids t0
    ids=$(timeout 10 squeue -h -o %i 2>/dev/null) || return 0
    [[ -n $ids ]] || return 0
    # shellcheck disable=SC2086 # one argument per job id
    timeout 10 scancel $ids 2>/dev/null || true
    t0=$(date +%s)
    while [[ -n $(timeout 5 squeue -h -t R,CG,S -o %i 2>/dev/null) ]] && (($(date +%s) - t0 < 10)); do
        sleep 0.2
    done
}

started_at() { # PID: its start time (clock ticks since boot), which a reused PID does not share
    sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $20 }'
}

# What was frozen, with each process's start time, written before the freeze: a stop killed
# (SIGKILL) between freeze and kill leaves the list for the next stop, which kills those that
# are still the same processes.
FROZEN=$RUN/frozen.pids

kill_frozen_before() {
    local pid start
    [[ -s $FROZEN ]] || { rm -f "$FROZEN"; return 0; }
    say "ending job processes an interrupted stop left frozen"
    while read -r pid start; do
        [[ $(started_at "$pid") == "$start" ]] && kill -KILL "$pid" 2>/dev/null || true
    done <"$FROZEN"
    rm -f "$FROZEN"
}

kill_strays() {
    local pids stopped= frozen pid t0
    kill_frozen_before
    pids=$(stray_steps | sort -n)
    [[ -n $pids ]] || return 0
    # Freeze the tree until it stops growing, then kill all that was frozen at once: a process
    # that forks between the scan and the kill would leave an orphan that no longer descends from
    # a slurmstepd (and one frozen in an earlier scan may have left the tree the same way).
    # Stopped here, this script must not leave them frozen: a frozen orphan is found by no later scan.
    trap 'for pid in $stopped $pids; do kill -KILL "$pid" 2>/dev/null || true; done; rm -f "$FROZEN"; exit 143' INT TERM HUP
    say "ending job processes left behind: $(echo $pids)"
    for _ in 1 2 3 4 5; do
        mkdir -p "$RUN"
        for pid in $pids; do echo "$pid $(started_at "$pid")"; done >>"$FROZEN"
        for pid in $pids; do kill -STOP "$pid" 2>/dev/null || true; done
        stopped=$(printf '%s\n' $stopped $pids | sort -nu)
        frozen=$pids
        pids=$(stray_steps | sort -n)
        [[ $pids == "$frozen" ]] && break
    done
    pids=$(printf '%s\n' $stopped $pids | sort -nu)
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
    rm -f "$FROZEN"
    trap - INT TERM HUP
    # SIGKILL is delivered at once but a process takes a moment to go (longer on a loaded machine)
    t0=$(date +%s)
    while (($(date +%s) - t0 < 10)); do
        local left=
        for pid in $pids; do live_pid "$pid" && left=1; done
        [[ -n $left ]] || return 0
        sleep 0.1
    done
    say "warning: job processes still alive after SIGKILL: $(echo $pids)"
}

cmd_stop() {
    [[ -d $ROOT ]] || return 0
    need_root
    local t0; t0=$(now)
    if (($#)); then
        local d
        for d in "$@"; do
            [[ " ${DAEMONS[*]} " == *" $d "* ]] || die "unknown daemon: $d (one of: ${DAEMONS[*]})"
        done
        stop_group "$@"
    else
        # slurmd and slurmctld first (slurmctld reports to slurmdbd on the way out), the database last
        local t
        t=$(now); cancel_jobs; say "jobs cancelled $(since "$t") s"
        t=$(now); stop_group "${NODES[@]/#/slurmd-}" slurmctld; say "slurmd+slurmctld $(since "$t") s"
        t=$(now); stop_group slurmdbd; say "slurmdbd $(since "$t") s"
        t=$(now); stop_group mariadbd; say "mariadbd $(since "$t") s"
        t=$(now); stop_group munged; say "munged $(since "$t") s"
        kill_strays
    fi
    say "stopped in $(since "$t0") s"
}

cmd_status() {
    local name pid rc=0
    echo "root $ROOT, port base $BASE (slurmctld $CTLD_PORT, slurmdbd $DBD_PORT, mariadb $MYSQL_PORT," \
        "slurmd $SLURMD_PORT_FIRST-$SLURMD_PORT_LAST)"
    for name in "${DAEMONS[@]}"; do
        pid=$(pid_of "$name")
        if alive "$pid" "$name"; then
            printf '%-12s running (pid %s)\n' "$name" "$pid"
        else
            printf '%-12s stopped\n' "$name"
            rc=3
        fi
    done
    if running slurmctld; then timeout 5 sinfo -N -o '%N %t %G' || true; fi
    return $rc
}

# --- install ---------------------------------------------------------------------------------------

cmd_install() {
    local pkgs=(slurm-wlm slurmdbd mariadb-server munge prometheus) missing=() p
    for a in "$@"; do
        case $a in
            --browser) pkgs+=(chromium chromium-driver) ;;
            *) die "unknown option for install: $a" ;;
        esac
    done
    need_root
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
        say "already installed: ${pkgs[*]}"
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    # update the package lists only when there are none (fresh image) or the install cannot find them
    if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
        apt-get update -q
    fi
    apt-get install -y -q "${missing[@]}" || { apt-get update -q && apt-get install -y -q "${missing[@]}"; }
}

case ${1:-} in
    install) shift; cmd_install "$@" ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
esac

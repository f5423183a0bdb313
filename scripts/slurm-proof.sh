#!/usr/bin/env bash
# Proof on a real Slurm (issue #33): `kreplay verify --shard auto` as a Slurm job array splits
# a corpus so that every capture is verified exactly once.
#
#   scripts/slurm-proof.sh [KREPLAY_BINARY]     (default: target/debug/kreplay)
#
# It installs Debian's slurm-wlm and munge (apt-get, as root) unless they are there, starts a
# private one-node cluster from a temporary folder (its own munged, slurmctld and slurmd, on
# ports of its own, no systemd, no cgroups), submits examples/slurm/verify-corpus.sbatch as an
# array of 3 tasks over testdata/captures (the intact captures: the damaged ones the tests
# use live in testdata/golden), and checks the concatenated JSON lines: every capture once,
# each `verified`, at least two shards non-empty. The daemons are stopped and the folder
# removed on every exit. A machine that cannot install Slurm (not root, no apt-get, no
# network) is skipped with the reason, or fails when KREPLAY_REQUIRE_SLURM=1.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
corpus=$repo/testdata/captures
tasks=3
job_name=kreplay-slurm-proof
export PATH="$PATH:/usr/sbin:/sbin"

say() { echo "slurm-proof: $*"; }
fail() {
    echo "slurm-proof: FAILED: $*" >&2
    exit 1
}
# The machine cannot run the proof: skip, unless the caller requires it.
unavailable() {
    if [ "${KREPLAY_REQUIRE_SLURM:-0}" = 1 ]; then
        fail "$* (and KREPLAY_REQUIRE_SLURM=1 requires the proof)"
    fi
    say "skipped: $*"
    exit 0
}

kreplay=${1:-${CARGO_TARGET_DIR:-target}/debug/kreplay}
[ -x "$kreplay" ] || fail "$kreplay is not an executable: build it first (cargo build -p kreplay) or name it"
kreplay=$(cd "$(dirname "$kreplay")" && pwd)/$(basename "$kreplay")

started=$SECONDS
tmp=$(mktemp -d /tmp/kreplay-slurm-proof.XXXXXX)
chmod 700 "$tmp"
daemons=() # "name:pid", in start order

stop_daemons() {
    local status=$?
    # Only in the proof's own cluster: on a real Slurm node the default one is someone's.
    if [ "${SLURM_CONF:-}" = "$tmp/slurm.conf" ]; then
        scancel --name="$job_name" 2>/dev/null || true
    fi
    local i entry pid
    for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
        entry=${daemons[i]}
        pid=${entry#*:}
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null || true
    done
    if [ "$status" != 0 ] && [ -d "$tmp/log" ]; then
        # A daemon in the foreground writes its log to stderr too: *.out holds it all.
        for log in "$tmp"/log/*.out "$tmp"/job/*.log; do
            [ -s "$log" ] || continue
            echo "--- $log (last lines)" >&2
            tail -n 20 "$log" >&2
        done
    fi
    rm -rf "$tmp"
    exit "$status"
}
trap stop_daemons EXIT
trap 'exit 130' INT TERM

# Installs slurm-wlm and munge unless every command the proof runs is there already.
install_slurm() {
    local missing=()
    for c in munged munge slurmctld slurmd sbatch sinfo scancel; do
        command -v "$c" >/dev/null || missing+=("$c")
    done
    if [ ${#missing[@]} = 0 ]; then
        say "Slurm is installed ($(slurmctld -V))"
        return
    fi
    say "installing Debian's slurm-wlm and munge (missing: ${missing[*]})"
    command -v apt-get >/dev/null || unavailable "no apt-get: cannot install slurm-wlm and munge"
    local log=$tmp/apt.log install=(apt-get install -y -q --no-install-recommends slurm-wlm munge)
    if ! DEBIAN_FRONTEND=noninteractive "${install[@]}" >"$log" 2>&1; then
        # A clean machine may have no package lists yet.
        DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$log" 2>&1 &&
            DEBIAN_FRONTEND=noninteractive "${install[@]}" >>"$log" 2>&1 ||
            unavailable "apt-get cannot install slurm-wlm and munge (no network?): $(tail -n 1 "$log")"
    fi
    say "installed $(slurmctld -V) in $((SECONDS - started)) s"
}

# Starts a daemon in the foreground of a background job, remembered for stop_daemons.
start() {
    local name=$1
    shift
    "$@" >"$tmp/log/$name.out" 2>&1 &
    daemons+=("$name:$!")
}

# Fails when a daemon the proof started has exited.
check_daemons() {
    local entry
    for entry in "${daemons[@]}"; do
        kill -0 "${entry#*:}" 2>/dev/null || fail "${entry%%:*} exited (its log follows)"
    done
}

start_munge() {
    mkdir -p "$tmp/munge"
    chmod 700 "$tmp/munge"
    head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
    chmod 400 "$tmp/munge/munge.key"
    munge_socket=$tmp/munge/munge.socket
    start munged munged --foreground --force --key-file="$tmp/munge/munge.key" \
        --socket="$munge_socket" --pid-file="$tmp/munge/munged.pid" \
        --seed-file="$tmp/munge/munged.seed" --log-file="$tmp/log/munged.log"
    for _ in $(seq 50); do
        munge -n -S "$munge_socket" 2>/dev/null | unmunge -S "$munge_socket" >/dev/null 2>&1 && return
        check_daemons
        sleep 0.2
    done
    fail "munged at $munge_socket does not answer after 10 s"
}

# A one-node cluster that needs neither systemd nor cgroups, all its state in $tmp.
write_slurm_conf() {
    local host=$1 cpus=$2 port=$3
    mkdir -p "$tmp/state" "$tmp/spool" "$tmp/job" "$tmp/results"
    cat >"$tmp/slurm.conf" <<EOF
ClusterName=kreplay-proof
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$munge_socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=proof Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$tmp/slurm.conf
}

wait_for_idle_node() {
    local host=$1 state=
    for _ in $(seq 120); do
        state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
        [ "$state" = idle ] && return
        check_daemons
        sleep 0.5
    done
    fail "node $host is not idle after 60 s (sinfo says: ${state:-nothing})"
}

# Every capture of the corpus in exactly one shard's lines, verified; prints
# "CAPTURES PER-SHARD-COUNTS" (counts joined by /).
check_results() {
    python3 - "$corpus" "$tmp/results" "$tasks" <<'EOF'
import collections, json, pathlib, sys

corpus, results, tasks = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
expected = {str(p) for p in corpus.rglob("*.krr")}
seen, per_shard, problems = collections.Counter(), [], []
for i in range(tasks):
    path = results / f"shard-{i}.jsonl"
    if not path.exists():
        problems.append(f"task {i} wrote no {path.name}")
        per_shard.append(0)
        continue
    lines = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    per_shard.append(len(lines))
    for l in lines:
        seen[l["file"]] += 1
        if l["verdict"] != "verified":
            problems.append(f"{l['file']}: verdict {l['verdict']} ({l.get('error')})")
missing = sorted(expected - set(seen))
extra = sorted(set(seen) - expected)
twice = sorted(f for f, n in seen.items() if n > 1)
problems += [f"never verified: {f}" for f in missing]
problems += [f"not a testdata capture: {f}" for f in extra]
problems += [f"verified {seen[f]} times: {f}" for f in twice]
if sum(1 for n in per_shard if n > 0) < 2:
    problems.append(f"fewer than two shards did any work: {per_shard}")
if not expected:
    problems.append(f"{corpus} holds no .krr capture")
if problems:
    sys.exit("\n".join(problems))
print(len(expected), "/".join(map(str, per_shard)))
EOF
}

# The cluster's slurmd starts each task as the submitting user: only root can.
[ "$(id -u)" = 0 ] || unavailable "not root: cannot install Slurm or run its slurmd"
install_slurm
command -v python3 >/dev/null || fail "python3 is needed to read the JSON lines"
mkdir -p "$tmp/log"
host=$(hostname -s)
cpus=$(nproc)
port=$((20000 + ($$ % 5000) * 2))
say "starting munged, slurmctld and slurmd for node $host ($cpus CPUs, ports $port-$((port + 1))) in $tmp"
start_munge
write_slurm_conf "$host" "$cpus" "$port"
start slurmctld slurmctld -D -c -f "$SLURM_CONF"
start slurmd slurmd -D -f "$SLURM_CONF"
wait_for_idle_node "$host"
say "node $host is idle; submitting examples/slurm/verify-corpus.sbatch as an array of $tasks tasks"

job_started=$SECONDS
if ! PATH="$(dirname "$kreplay"):$PATH" timeout 300 sbatch --wait --quiet --array=0-$((tasks - 1)) \
    --job-name="$job_name" --cpus-per-task=1 --chdir="$tmp/job" --output="$tmp/job/task-%a.log" \
    examples/slurm/verify-corpus.sbatch "$corpus" "$tmp/results"; then
    fail "the array job failed or ran past 300 s (task logs follow)"
fi
job_s=$((SECONDS - job_started))
figures=$(check_results) || fail "the shards' JSON lines do not cover the corpus once (above)"
read -r captures per_shard <<<"$figures"
say "ok: $captures captures verified exactly once by a $tasks-task Slurm array (per shard: $per_shard captures); job $job_s s, whole proof $((SECONDS - started)) s"

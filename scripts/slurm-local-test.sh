#!/usr/bin/env bash
# Proves packaging/slurm/ on a real scheduler: brings up a throw-away single-node Slurm cluster on localhost
# (munged, slurmctld, slurmd started here, no systemd, no cgroups), submits a small demo-model NIAH sweep as a
# job array through packaging/slurm/submit-sweep.sh, and checks that the merged summary (and every record, timings
# aside) equals what the same sweep writes unsharded in one process; then removes some records, submits the
# sweep again under another shard count, and checks that exactly those are recomputed and the summary still
# equals. Prints PASS or FAIL with the wall time.
#
#   scripts/slurm-local-test.sh [--shards N] [--timeout SECONDS] [--smoke] [--keep]
#
#   --shards N     array tasks of the sweep (default 4)
#   --timeout S    the longest the jobs may take, in seconds (default 1800)
#   --smoke        bring the cluster up and run a trivial 4-task array job only (no varrate needed)
#   --keep         keep the temporary directory (configuration, logs, outputs) and print its path
#
# Needs root (it installs Debian's slurm-wlm and munge with apt-get when they are missing, and runs the daemons
# as root). The binary is $VARRATE_BIN, else build/bin/varrate of this repository. Whatever happens, the daemons
# it started are stopped by their PIDs and the temporary directory is removed on exit.
# shellcheck disable=SC2317  # functions run from the EXIT trap and through wait_for look unreachable to it
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VARRATE_BIN=${VARRATE_BIN:-$REPO/build/bin/varrate}
SUBMIT=$REPO/packaging/slurm/submit-sweep.sh
MODEL=$REPO/resources/models/varrate-demo
NODE=varrate-local  # the test cluster's one node

shards=4
timeout_s=1800
smoke=0
keep=0
while (($#)); do
    case $1 in
        --shards) shards=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        --smoke) smoke=1; shift ;;
        --keep) keep=1; shift ;;
        -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "slurm-local-test: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "slurm-local-test: --shards takes a positive integer" >&2; exit 2; }
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || { echo "slurm-local-test: --timeout takes seconds" >&2; exit 2; }

start_us=${EPOCHREALTIME/./}
elapsed() {  # seconds since the start, to 0.1 s
    local d=$((${EPOCHREALTIME/./} - start_us))
    printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000))
}
log() { printf '[slurm-local-test %6ss] %s\n' "$(elapsed)" "$*" >&2; }

if ((EUID != 0)); then
    echo "slurm-local-test: run as root (it installs packages and runs munged, slurmctld and slurmd as root)" >&2
    exit 2
fi
if ((!smoke)) && [[ ! -x $VARRATE_BIN ]]; then
    echo "slurm-local-test: no varrate binary at $VARRATE_BIN (build it, or set VARRATE_BIN)" >&2
    exit 2
fi

# --- packages -------------------------------------------------------------------------------------------------
need_install=0
for tool in munged munge unmunge slurmctld slurmd sbatch squeue sinfo scontrol scancel jq; do
    command -v "$tool" > /dev/null || need_install=1
done
if ((need_install)); then
    log "installing slurm-wlm and munge (apt-get)"
    # The packages would start their own munged, slurmctld and slurmd where they can; nothing of theirs is used
    # (every daemon here runs with its own configuration), so a policy-rc.d keeps them from starting.
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod 0755 "$policy"
        own_policy=1
        trap 'rm -f "$policy"' EXIT
    fi
    "$REPO/scripts/apt-install.sh" slurm-local-test slurm-wlm munge jq
    if ((own_policy)); then
        rm -f "$policy"
        trap - EXIT
    fi
    for tool in munged munge unmunge slurmctld slurmd sbatch squeue sinfo scontrol scancel jq; do
        command -v "$tool" > /dev/null || { echo "slurm-local-test: $tool is missing (apt-get install slurm-wlm" \
            "munge jq)" >&2; exit 2; }
    done
fi

# --- state, cleanup -------------------------------------------------------------------------------------------
TMP=$(mktemp -d /tmp/varrate-slurm.XXXXXX)
chmod 0700 "$TMP"
declare -a started_pids=()  # daemons and background processes started here, stopped in reverse order
munged_pid='' slurmctld_pid='' slurmd_pid=''
result=''  # the PASS or FAIL line, printed last, after the daemons are down

stop_pid() {  # stop_pid PID NAME: TERM, wait up to 15 s, then KILL
    local pid=$1 name=$2 i
    kill -0 "$pid" 2> /dev/null || return 0
    kill -TERM "$pid" 2> /dev/null || true
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2> /dev/null || { wait "$pid" 2> /dev/null || true; return 0; }
        sleep 0.1
    done
    log "$name ($pid) ignored SIGTERM; killing it"
    kill -KILL "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
}

step_pids() {  # PIDs of the processes holding a unix socket bound under $TMP/spool (this cluster's job steps)
    local inodes fd link
    inodes=" $(awk -v dir="$TMP/spool/" 'index($8, dir) == 1 { printf "%s ", $7 }' /proc/net/unix) "
    [[ $inodes == "  " ]] && return 0
    for fd in /proc/[0-9]*/fd/*; do
        link=$(readlink "$fd" 2> /dev/null) || continue
        [[ $link == socket:\[*\] && $inodes == *" ${link//[^0-9]/} "* ]] && { fd=${fd#/proc/}; echo "${fd%%/*}"; }
    done | sort -u
}
descendants() {  # descendants PID: its children, theirs, ...
    local child children
    children=$(cat /proc/"$1"/task/*/children 2> /dev/null)
    for child in $children; do
        echo "$child"
        descendants "$child"
    done
}

slurmd_alive() { [[ -n $slurmd_pid ]] && kill -0 "$slurmd_pid" 2> /dev/null; }

cleanup() {
    local rc=$? i pid
    set +e
    trap - EXIT INT TERM
    if [[ -n $slurmctld_pid ]] && kill -0 "$slurmctld_pid" 2> /dev/null; then
        # Jobs first: a job's slurmstepd outlives slurmd, so cancel them while slurmd can still end them.
        if [[ -n $(squeue -h -o %i 2> /dev/null) ]]; then
            log "cancelling the jobs still queued or running"
            # shellcheck disable=SC2046  # job ids
            scancel --full --quiet $(squeue -h -o %i 2> /dev/null | sort -u) 2> /dev/null
            for ((i = 0; i < 300; i++)); do
                [[ -z $(squeue -h -o %i 2> /dev/null) ]] && break
                slurmd_alive || break  # nobody left to end them
                sleep 0.1
            done
        fi
    fi
    # The job steps' sockets in the spool directory go when their slurmstepd ends.
    for ((i = 0; i < 100; i++)); do
        compgen -G "$TMP/spool/${NODE}_*" > /dev/null || break
        slurmd_alive || break
        sleep 0.1
    done
    for ((i = ${#started_pids[@]} - 1; i >= 0; i--)); do
        pid=${started_pids[i]%%:*}
        stop_pid "$pid" "${started_pids[i]#*:}"
    done
    # A job step whose slurmd went first stays behind (slurmstepd blocks SIGTERM): find it by the socket it
    # holds in this cluster's spool directory, and end it and what it runs.
    local -a doomed
    for pid in $(step_pids); do
        log "ending the job step left behind: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null) ($pid)"
        mapfile -t doomed < <(descendants "$pid")
        kill -KILL "${doomed[@]}" "$pid" 2> /dev/null
    done
    if ((keep)); then
        log "kept $TMP"
    else
        rm -rf "$TMP"
    fi
    [[ -n $result ]] || result="FAIL: stopped early (exit $rc)"
    ((rc == 0)) || [[ $result == FAIL* ]] || result="FAIL: exit $rc after: $result"
    echo "$result; wall time $(elapsed) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_for() {  # wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s (gives up when $watch_pid dies)
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$(($(date +%s) + limit))
    until "$@"; do
        if [[ -n ${watch_pid:-} ]] && ! kill -0 "$watch_pid" 2> /dev/null; then
            log "gave up waiting for $what: process $watch_pid ended"
            return 1
        fi
        if (($(date +%s) >= deadline)); then
            log "timed out after ${limit}s waiting for $what"
            return 1
        fi
        sleep 0.2
    done
}

port_busy() {  # a TCP socket listens on port $1 (any address)
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2> /dev/null
}
pick_port() {  # a free TCP port from a start, skipping any in $*
    local p=$1
    shift
    while port_busy "$p" || [[ " $* " == *" $p "* ]]; do p=$((p + 1)); done
    echo "$p"
}

# --- munge ----------------------------------------------------------------------------------------------------
mkdir -p "$TMP/munge" "$TMP/state" "$TMP/spool" "$TMP/log" "$TMP/run"
chmod 0700 "$TMP/munge"
dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$TMP/munge/munge.key"
MUNGE_SOCKET=$TMP/munge/munge.socket
# Each daemon in its own session: a Ctrl-C (SIGINT to the terminal's process group) must reach this script,
# which cancels the jobs first, and not the daemons. (Not a process group leader, setsid execs in place: $! is
# the daemon.)
setsid munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$TMP/munge/munge.key" \
    --pid-file="$TMP/munge/munged.pid" --log-file="$TMP/log/munged.log" --seed-file="$TMP/munge/munged.seed" \
    > "$TMP/log/munged.out" 2>&1 &
munged_pid=$!
started_pids+=("$munged_pid:munged")
watch_pid=$munged_pid wait_for 20 "munged's socket" test -S "$MUNGE_SOCKET" \
    || { cat "$TMP/log/munged.log" >&2; exit 1; }
munge --socket="$MUNGE_SOCKET" -n | unmunge --socket="$MUNGE_SOCKET" > /dev/null
log "munged up (pid $munged_pid)"

# --- slurm.conf -----------------------------------------------------------------------------------------------
HOST=$(hostname -s)  # slurmctld only runs on the host SlurmctldHost names
CPUS=$(nproc)
MEM_MB=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
CTLD_PORT=$(pick_port 16817)
SLURMD_PORT=$(pick_port 16818 "$CTLD_PORT")
export SLURM_CONF=$TMP/slurm.conf
cat > "$SLURM_CONF" << EOF
# Single-node test cluster of scripts/slurm-local-test.sh (cgroup-free, everything as root, state in $TMP).
ClusterName=varrate-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/run/slurmctld.pid
SlurmdPidFile=$TMP/run/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
DependencyParameters=kill_invalid_depend
ReturnToService=2
MailProg=/bin/true
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# --- slurmctld, slurmd ----------------------------------------------------------------------------------------
setsid slurmctld -D -i -f "$SLURM_CONF" > "$TMP/log/slurmctld.out" 2>&1 &
slurmctld_pid=$!
started_pids+=("$slurmctld_pid:slurmctld")
watch_pid=$slurmctld_pid wait_for 30 "slurmctld" scontrol ping -Q > /dev/null 2>&1 \
    || { tail -n 30 "$TMP/log/slurmctld.log" "$TMP/log/slurmctld.out" >&2; exit 1; }
setsid slurmd -D -f "$SLURM_CONF" -N "$NODE" > "$TMP/log/slurmd.out" 2>&1 &
slurmd_pid=$!
started_pids+=("$slurmd_pid:slurmd")
node_idle() { [[ $(sinfo -h -n "$NODE" -o %T 2> /dev/null) == idle ]]; }
watch_pid=$slurmd_pid wait_for 60 "node $NODE to be idle" node_idle \
    || { sinfo -N -l >&2; tail -n 30 "$TMP/log/slurmd.log" "$TMP/log/slurmd.out" >&2; exit 1; }
log "cluster up: slurmctld (pid $slurmctld_pid, port $CTLD_PORT), slurmd (pid $slurmd_pid, port $SLURMD_PORT)," \
    "node $NODE with $CPUS CPUs and $MEM_MB MB"

# --- jobs -----------------------------------------------------------------------------------------------------
job_state() {  # job_state ID: its tasks' states, counted ("4 COMPLETED")
    scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | sort | uniq -c | xargs
}
jobs_done() {  # jobs_done ID...: none of them is pending or running any more
    local id
    for id in "$@"; do
        [[ -z $(squeue -h -j "$id" -o %i 2> /dev/null) ]] || return 1
    done
}
all_completed() {  # all_completed ID...: every task of every job ended COMPLETED
    local id states
    for id in "$@"; do
        states=$(scontrol show job "$id" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | sort -u)
        [[ $states == JobState=COMPLETED ]] || return 1
    done
}

if ((smoke)); then
    mkdir -p "$TMP/smoke"
    # shellcheck disable=SC2016  # expanded in the job
    smoke_id=$(sbatch --parsable --array=0-3 --chdir="$TMP/smoke" --output="$TMP/smoke/%A_%a.out" \
        --wrap 'echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT on $(hostname)"')
    smoke_id=${smoke_id%%;*}
    log "submitted array job $smoke_id"
    wait_for "$timeout_s" "array job $smoke_id" jobs_done "$smoke_id" || true
    cat "$TMP/smoke/"*.out >&2 || true
    if all_completed "$smoke_id" && (($(cat "$TMP/smoke/"*.out | wc -l) == 4)); then
        result="PASS: a 4-task array job completed on the local cluster"
        exit 0
    fi
    result="FAIL: array job $smoke_id ended $(job_state "$smoke_id")"
    exit 1
fi

# --- the sweep: sharded through Slurm, and unsharded in one process -------------------------------------------
# shellcheck disable=SC2054  # commas are varrate's list syntax
sweep=(--model "$MODEL" --lengths 256,512 --depths 0,50,100 --samples 4 --methods full,varrate,snapkv
    --budget 0.2 --max-new-tokens 8)
mkdir -p "$TMP/sweep"
SHARDED=$TMP/sweep/sharded
REF=$TMP/sweep/unsharded
deadline=$(($(date +%s) + timeout_s))

run_sharded() {  # run_sharded N: submits the sweep as N shards + summary, waits; false unless all completed
    local n=$1 ids array_id summary_id left f
    ids=$("$SUBMIT" --shards "$n" --cpus 1 --varrate "$VARRATE_BIN" -- "${sweep[@]}" --out "$SHARDED")
    array_id=$(sed -n 's/^ARRAY_JOB_ID=//p' <<< "$ids")
    summary_id=$(sed -n 's/^SUMMARY_JOB_ID=//p' <<< "$ids")
    [[ -n $array_id && -n $summary_id ]] || { log "submit-sweep.sh printed no job ids: $ids"; return 1; }
    log "submitted array job $array_id ($n shards) and summarise job $summary_id (afterok:$array_id)"
    [[ -z ${on_submitted:-} ]] || "$on_submitted"
    left=$((deadline - $(date +%s)))
    wait_for $((left > 0 ? left : 1)) "jobs $array_id and $summary_id" jobs_done "$array_id" "$summary_id" || true
    log "array job $array_id: $(job_state "$array_id"); summarise job $summary_id: $(job_state "$summary_id")"
    for f in "$SHARDED/slurm-logs/niah-${array_id}_"*.out "$SHARDED/slurm-logs/summarize-$summary_id.out"; do
        [[ -e $f ]] && tail -n 1 "$f" | sed "s|^|  ${f##*/}: |" >&2
    done
    all_completed "$array_id" "$summary_id" && return 0
    sharded_failure="array job $array_id ended $(job_state "$array_id"), summarise job $summary_id ended"
    sharded_failure+=" $(job_state "$summary_id")"
    return 1
}

# The same sweep in one process, while the array runs (one thread, like each shard).
ref_rc=0
run_unsharded() {
    local pid
    "$VARRATE_BIN" niah "${sweep[@]}" --threads 1 --out "$REF" > "$TMP/log/unsharded.out" 2>&1 &
    pid=$!
    started_pids+=("$pid:varrate niah (unsharded)")
    wait "$pid" || ref_rc=$?
    log "unsharded sweep done (exit $ref_rc)"
}

on_submitted=run_unsharded
sharded_ok=1
run_sharded "$shards" || sharded_ok=0
on_submitted=''
if ((ref_rc != 0)); then
    tail -n 20 "$TMP/log/unsharded.out" >&2
    result="FAIL: the unsharded sweep exited $ref_rc"
    exit 1
fi
((sharded_ok)) || { result="FAIL: $sharded_failure"; exit 1; }

# --- compare --------------------------------------------------------------------------------------------------
# Keys that legitimately differ between two runs: wall-clock timings and timestamps. Records have them (their
# `durations`, which also count the methods that shared the document's prefill, fewer in a resumed run, and
# their `timestamp`); the summaries should not.
volatile='walk(if type == "object" then with_entries(select(.key | test("^(durations|timestamp)$|_ms$") | not))
    else . end)'
list_records() { (cd "$1" && find records -name '*.json' 2> /dev/null | sort) || true; }

compare_to_ref() {  # appends what differs to failures[], says what is equal in compared (and extras)
    local f ref_records sharded_records differing line
    local -a records
    for f in summary.json summary.csv heatmap.png sweep.json; do
        [[ -f $SHARDED/$f ]] || failures+=("sharded run has no $f")
        [[ -f $REF/$f ]] || failures+=("unsharded run has no $f")
    done
    compared=''
    if [[ -f $SHARDED/summary.json && -f $REF/summary.json ]]; then
        if cmp -s "$SHARDED/summary.json" "$REF/summary.json"; then
            compared="summary.json byte-identical"
        elif cmp -s <(jq -S . "$SHARDED/summary.json") <(jq -S . "$REF/summary.json"); then
            compared="summary.json equal as JSON (formatting differs)"
        elif cmp -s <(jq -S "$volatile" "$SHARDED/summary.json") <(jq -S "$volatile" "$REF/summary.json"); then
            compared="summary.json equal but for timing fields"
        else
            failures+=("summary.json differs")
            diff <(jq -S . "$REF/summary.json") <(jq -S . "$SHARDED/summary.json") | head -n 40 >&2 || true
        fi
    fi
    if [[ -f $SHARDED/summary.csv && -f $REF/summary.csv ]]; then
        if cmp -s "$SHARDED/summary.csv" "$REF/summary.csv"; then
            compared+=", summary.csv identical"
        else
            failures+=("summary.csv differs")
            diff "$REF/summary.csv" "$SHARDED/summary.csv" | head -n 20 >&2 || true
        fi
    fi
    # Not failures, but said: the heatmap's bytes and sweep.json (what each shard writes beside its records).
    extras=''
    if [[ -f $SHARDED/heatmap.png && -f $REF/heatmap.png ]]; then
        if cmp -s "$SHARDED/heatmap.png" "$REF/heatmap.png"; then extras+=", heatmap.png identical"; else
            extras+=", heatmap.png differs byte-wise"; fi
    fi
    if [[ -f $SHARDED/sweep.json && -f $REF/sweep.json ]]; then
        if cmp -s <(jq -S . "$SHARDED/sweep.json") <(jq -S . "$REF/sweep.json"); then extras+=", sweep.json equal"
        else extras+=", sweep.json differs"; fi
    fi
    # Every record: the same set, and each one equal but for its timings.
    ref_records=$(list_records "$REF")
    sharded_records=$(list_records "$SHARDED")
    n_records=$(grep -c . <<< "$ref_records" || true)
    if [[ -z $ref_records ]]; then
        failures+=("the unsharded run wrote no records")
    elif [[ $ref_records != "$sharded_records" ]]; then
        failures+=("the record files differ")
        diff <(echo "$ref_records") <(echo "$sharded_records") | head -n 20 >&2 || true
    else
        # One jq per side: a line per record, in the same order.
        mapfile -t records <<< "$ref_records"
        diff <(cd "$REF" && jq -c -S "$volatile" "${records[@]}") \
            <(cd "$SHARDED" && jq -c -S "$volatile" "${records[@]}") > "$TMP/records.diff" || true
        differing=$(grep -c '^<' "$TMP/records.diff" || true)
        for line in $(grep -o '^[0-9]*' "$TMP/records.diff" | head -n 3); do  # diff's "12c12" lines
            log "record ${records[line - 1]} differs beyond timings"
        done
        if ((differing)); then
            failures+=("$differing of $n_records records differ beyond timings")
        else
            compared+=", all $n_records records equal but for timings"
        fi
    fi
}

failures=()
compare_to_ref
if ((${#failures[@]})); then
    result="FAIL: $(IFS=';'; echo "${failures[*]}")"
    exit 1
fi
first="$shards-task array + summarise job: $compared$extras"
log "sharded = unsharded: $compared$extras"

# --- resume ---------------------------------------------------------------------------------------------------
# Records are the progress: with some of them removed, the same sweep submitted again (under another shard
# count) must compute exactly those and reuse the rest, and summarise as before.
resume_shards=$((shards > 1 ? shards - 1 : 2))
mapfile -t dropped < <(list_records "$SHARDED" | awk 'NR % 10 == 3')
(cd "$SHARDED" && rm -f "${dropped[@]}")
touch "$TMP/before-resume"
sleep 1  # whole-second file times
run_sharded "$resume_shards" || { result="FAIL: resumed run: $sharded_failure"; exit 1; }
rewritten=$(cd "$SHARDED" && find records -name '*.json' -newer "$TMP/before-resume" | sort)
if [[ $rewritten != "$(printf '%s\n' "${dropped[@]}" | sort)" ]]; then
    n_rewritten=$(grep -c . <<< "$rewritten" || true)
    failures+=("the resumed run rewrote $n_rewritten records, not the ${#dropped[@]} removed")
fi
compare_to_ref
if ((${#failures[@]})); then
    result="FAIL: resumed run: $(IFS=';'; echo "${failures[*]}")"
    exit 1
fi
result="PASS: $first; resumed as $resume_shards shards after removing ${#dropped[@]} records: those recomputed,"
result+=" the rest reused, summary.json still equal"
exit 0

#!/usr/bin/env bash
# Submits a `varrate niah` (or, with `eval` first, `varrate eval`) sweep as a Slurm job array (one shard per task) and a summarise job that runs once
# every task has succeeded (see packaging/slurm/README.md).
#
#   submit-sweep.sh [--shards N] [--cpus C | --gpu] [--time T] [--mem M] [--partition P] [--account A]
#                   [--logs DIR] [--varrate BIN] [--sbatch-arg ARG]... [--dry-run] -- NIAH-ARGS... --out DIR
#
#   --shards N        array tasks, shard I of N each (default 4)
#   --cpus C          CPUs per task, passed to varrate as --threads (default 1; with --gpu also the host threads)
#   --gpu             one GPU per task (--gres=gpu:1) and --device cuda
#   --time, --mem, --partition, --account
#                     passed to sbatch for both jobs (--mem is per node, i.e. per task here)
#   --logs DIR        where the jobs' output goes (default: OUT/slurm-logs)
#   --varrate BIN     the varrate binary, on a path the compute nodes see (default: $VARRATE_BIN, else varrate
#                     on PATH, else this repository's build/bin/varrate)
#   --sbatch-arg ARG  any other sbatch option, for both jobs (repeatable, e.g. --sbatch-arg=--qos=short)
#   --dry-run         print the sbatch commands instead of running them
#
# Prints `ARRAY_JOB_ID=<id>` and `SUMMARY_JOB_ID=<id>` on stdout (messages go to stderr).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sbatch_script=$here/varrate-sweep.sbatch

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "submit-sweep: $*" >&2; exit 2; }

shards=4
cpus=1
gpu=0
logs=''
dry_run=0
bin=${VARRATE_BIN:-}
common=()  # sbatch options of both jobs
while (($#)); do
    case $1 in
        --shards) shards=${2:?}; shift 2 ;;
        --cpus) cpus=${2:?}; shift 2 ;;
        --gpu) gpu=1; shift ;;
        --time | --mem | --partition | --account) common+=("$1=${2:?}"); shift 2 ;;
        --time=* | --mem=* | --partition=* | --account=*) common+=("$1"); shift ;;
        --logs) logs=${2:?}; shift 2 ;;
        --varrate) bin=${2:?}; shift 2 ;;
        --sbatch-arg) common+=("${2:?}"); shift 2 ;;
        --sbatch-arg=*) common+=("${1#--sbatch-arg=}"); shift ;;
        --dry-run) dry_run=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        *) die "unknown option $1 (the sweep's own arguments go after --)" ;;
    esac
done
niah_args=("$@")
[[ $shards =~ ^[1-9][0-9]*$ ]] || die "--shards takes a positive integer"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus takes a positive integer"

# The output folder: every shard writes there, the summarise job reads it, the logs go beside it.
out=''
for ((i = 0; i < ${#niah_args[@]}; i++)); do
    case ${niah_args[i]} in
        --out) out=${niah_args[i + 1]:-} ;;
        --out=*) out=${niah_args[i]#--out=} ;;
        --shard | --shard=*) die "--shard is set per array task; leave it out" ;;
        --threads | --threads=*) die "--threads comes from --cpus" ;;
        --device | --device=*) die "--device comes from --gpu (cuda) or its absence (cpu)" ;;
    esac
done
[[ -n $out ]] || die "the sweep's arguments (after --) need --out DIR"
abspath() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
out=$(abspath "$out")
for ((i = 0; i < ${#niah_args[@]}; i++)); do  # the shards get the same folder, absolute
    case ${niah_args[i]} in
        --out) niah_args[i + 1]=$out ;;
        --out=*) niah_args[i]=--out=$out ;;
    esac
done
logs=$(abspath "${logs:-$out/slurm-logs}")
# Slurm does not create the folder of a job's output file.
((dry_run)) || mkdir -p "$logs"

# The binary, as an absolute path: the jobs run it on the compute nodes.
if [[ -z $bin ]]; then
    if command -v varrate > /dev/null; then
        bin=varrate
    elif [[ -x $here/../../build/bin/varrate ]]; then
        bin=$here/../../build/bin/varrate
    else
        die "no varrate binary: give --varrate BIN or set VARRATE_BIN"
    fi
fi
if [[ $bin != /* ]]; then
    resolved=$(command -v "$bin") || die "no varrate binary '$bin'"
    bin=$resolved
fi
[[ -x $bin ]] || die "$bin is not executable"
bin=$(abspath "$bin")

array_opts=(--array="0-$((shards - 1))" --job-name=varrate-niah --cpus-per-task="$cpus"
    --output="$logs/niah-%A_%a.out")
if ((gpu)); then
    array_opts+=(--gres=gpu:1)
    device=cuda
else
    device=cpu
fi
# sbatch passes the submitting environment on (--export=ALL); these are what the job script reads.
export VARRATE_BIN=$bin VARRATE_SHARDS=$shards VARRATE_DEVICE=$device

run_sbatch() {  # run_sbatch NAME SBATCH-ARGS...: prints the job id (NAME under --dry-run)
    local name=$1 id
    shift
    if ((dry_run)); then
        echo "VARRATE_BIN=$(printf %q "$VARRATE_BIN") VARRATE_SHARDS=$VARRATE_SHARDS VARRATE_DEVICE=$VARRATE_DEVICE" \
            "sbatch --parsable --export=ALL$(printf ' %q' "$@")" >&2
        echo "$name"
        return
    fi
    id=$(sbatch --parsable --export=ALL "$@")
    echo "${id%%;*}"
}

array_id=$(run_sbatch '<array-id>' "${common[@]}" "${array_opts[@]}" "$sbatch_script" "${niah_args[@]}")
echo "submit-sweep: array job $array_id: $shards shards of the sweep into $out (logs in $logs)" >&2
summary_id=$(run_sbatch '<summary-id>' "${common[@]}" --dependency="afterok:$array_id" --kill-on-invalid-dep=yes \
    --job-name=varrate-summarize --cpus-per-task=1 --output="$logs/summarize-%j.out" \
    "$sbatch_script" summarize "$out")
echo "submit-sweep: summarise job $summary_id runs after every task of $array_id succeeded" >&2
echo "ARRAY_JOB_ID=$array_id"
echo "SUMMARY_JOB_ID=$summary_id"

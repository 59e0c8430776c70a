#!/usr/bin/env bash
# Submit a BSF scaling sweep: a job array over worker counts, then a dependent fit job.
#
#   slurm/sweep.sh [--workers 1,2,4,8] [--reps N] [--throttle N] [--time HH:MM:SS] [--wait]
#                  [--one-per-node] [-- PYTHON-ARGS...]
#
# Run it from the directory the jobs should work in (the submit directory, which holds .venv
# unless HPCBSP_VENV says otherwise). Array task K runs `python PYTHON-ARGS` (default:
# -m hpcbsp.apps.bsf.jacobi) on K + 1 tasks (sweep-point.sbatch); when all succeed, sweep-fit.sbatch
# writes RUNS.csv, MODEL.json, validate.txt and speedup.png to runs/sweep-<array job id>/.
# --one-per-node places one task on each node, as a scalability prediction calibrated across
# nodes assumes (without it Slurm packs the tasks onto few nodes). Every point of the array asks
# for max(K) + 1 nodes (Slurm gives all tasks of an array one size), exclusive: a point of K
# workers uses K + 1 of them and holds the rest idle.
# Other sbatch options (account, partition, constraint) go in SBATCH_* variables, e.g.
# SBATCH_PARTITION=short slurm/sweep.sh ...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
bad() { echo "sweep.sh: $*" >&2; exit 2; }

workers=1,2,4,8
reps=1
throttle=""
time_limit=""
wait=0
per_node=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --workers) [[ $# -ge 2 ]] || bad "--workers needs a list such as 1,2,4"; workers=$2; shift 2 ;;
    --reps) [[ $# -ge 2 ]] || bad "--reps needs a number"; reps=$2; shift 2 ;;
    --throttle) [[ $# -ge 2 ]] || bad "--throttle needs a number"; throttle=$2; shift 2 ;;
    --time) [[ $# -ge 2 ]] || bad "--time needs a limit such as 00:20:00"; time_limit=$2; shift 2 ;;
    --wait) wait=1; shift ;;
    --one-per-node) per_node=1; shift ;;
    --) shift; break ;;
    *) bad "unknown option '$1' (see --help)" ;;
  esac
done
[[ $workers =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || bad "--workers must be positive integers separated by commas, not '$workers'"
[[ $reps =~ ^[1-9][0-9]*$ ]] || bad "--reps must be a positive integer, not '$reps'"
[[ -z $throttle || $throttle =~ ^[1-9][0-9]*$ ]] || bad "--throttle must be a positive integer, not '$throttle'"
command -v sbatch >/dev/null || bad "sbatch not found: run this on a Slurm login node"

max=$(tr ',' '\n' <<<"$workers" | sort -n | tail -n 1)
array=$workers${throttle:+%$throttle}
extra=()
[[ -n $time_limit ]] && extra+=(--time="$time_limit")
((per_node)) && extra+=(--nodes=$((max + 1)) --ntasks-per-node=1)

export SWEEP_REPS=$reps
unset SWEEP_DIR  # each array task names the directory after its array job id
array_id=$(sbatch --parsable --array="$array" --ntasks=$((max + 1)) "${extra[@]}" \
  "$here/sweep-point.sbatch" "$@")
array_id=${array_id%%;*}
dir=$PWD/runs/sweep-$array_id
echo "sweep.sh: array job $array_id: K = $workers, $reps run(s) each, up to $((max + 1)) tasks$( ((per_node)) && echo ", one per node")"
export SWEEP_DIR=$dir  # sbatch passes the environment on (its default --export=ALL)
fit=(sbatch --dependency=afterok:"$array_id" --kill-on-invalid-dep=yes)
if [[ $wait -eq 0 ]]; then
  fit_id=$("${fit[@]}" --parsable "$here/sweep-fit.sbatch")
  echo "sweep.sh: fit job ${fit_id%%;*} runs after it; results will be in $dir"
  exit 0
fi
echo "sweep.sh: waiting for the sweep and its fit job; results will be in $dir"
fit_id=$("${fit[@]}" --parsable "$here/sweep-fit.sbatch")
fit_id=${fit_id%%;*}
# Wait by asking Slurm for the fit job's state, every second for the first half minute, then
# every 10 s (sbatch --wait asks at 2, 10, 42 s ... after submission: a sweep of short points
# waited half a minute longer than it ran). A job that Slurm cancelled because a point failed
# ends CANCELLED; a state that cannot be read for a minute (slurmctld down) ends the wait.
state="" waited=0 unread=0
while :; do
  pause=$((waited < 30 ? 1 : 10))
  state=$(scontrol -o show job "$fit_id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case $state in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY) break ;;
    "") ((unread += pause, unread < 60)) || break ;;
    *) unread=0 ;;
  esac
  sleep "$pause"
  waited=$((waited + pause))
done
if [[ $state != COMPLETED ]]; then
  echo "sweep.sh: fit job $fit_id ended ${state:-in a state scontrol could not read for a minute}; see" \
       "$PWD/hpcbsp-sweep-fit-$fit_id.out or, if it never ran, the points' logs $PWD/hpcbsp-sweep-${array_id}_<K>.out" >&2
  exit 1
fi
echo "sweep.sh: done: $dir"

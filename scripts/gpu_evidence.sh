#!/usr/bin/env bash
# Issue 18's evidence on a borrowed GPU host, inside a fixed wall-clock budget, packed as one archive.
#
#   bash scripts/gpu_evidence.sh BUNDLE BUDGET_S OUTDIR
#
# BUNDLE: the folder holding the offline bundle's g01, g02, ... (`make offline-bundle`), or "-" to
# use $PYTHON as it is. BUDGET_S: seconds this script may take in all (a lease is short
# and stops without warning: every phase gets a deadline, and the archive is written on any exit).
# OUTDIR: where evidence.tgz goes, alone (a device call brings back 8 files of $OUT: the logs
# beside it made 9 on 2026-12-07's CPU dry run of a lease, and the tool drops what is past 8). The
# logs are built in a scratch folder and packed into the archive as evidence/.
#
# Phases: install (bundle → the host's own Python) → `gpu-check` with the `quick`
# replication running beside it (its runs resume while this host lives; a new one starts bare) → the
# quick replication stopped with Ctrl-C so the GPU is the bench's alone → `bench` (the sections
# in $BENCH_ONLY, or none; each is saved as it finishes) → REPORT.md → archive of everything but checkpoints
# (also when the script is stopped: the phase in flight is stopped first, with INT).
# Environment: PYTHON (the host's, default python3), PROFILE (quick), DEVICE (cuda), BENCH_ONLY,
# BENCH_OUT (outputs/bench for the default sections, else outputs/bench/<sections joined by +>),
# REPLICATE=0 (no replication: gpu-check and the bench get the GPU alone), STEPS_CONFIG (a run's
# config.yaml or FINDING@PROFILE: after gpu-check, `scripts/step_profile.py` times a few of its
# steps per setting, alone, for at most STEPS_S seconds, default 150, with STEPS_ARGS passed on,
# e.g. "--pool 4"), BENCH_QUICK=1 (tiny bench sizes, for a dry run on a CPU), CHECK_S
# (gpu-check's cap, 240; 0 skips it),
# RESERVE_S (what gpu-check leaves for the rest, 120), BACKLOG_S (after gpu-check, train the
# profile's backlog for at most that many seconds, `python -m ragen_lib backlog PROFILE --train`:
# only runs expected to finish start, judged studies first; implies REPLICATE=0; the finished runs
# come back in the archive, to commit under outputs/PROFILE/runs/ for the next lease to reuse).
set -u
if [ $# -ne 3 ]; then  # else bash's "$1: unbound variable" is all one sees
  sed -n 4,9p "$0" | sed 's/^# \{0,1\}//' >&2
  echo "error: give BUNDLE BUDGET_S OUTDIR (got $# argument(s))" >&2
  exit 2
fi
bundle=$1 budget=$2 out=$3
t0=$(date +%s)
PROFILE=${PROFILE:-quick} DEVICE=${DEVICE:-cuda}
# The lease's full bench: bench.SECTIONS less work, turns, trl and pool, which no lease has had
# the minutes for (each is run by naming it in BENCH_ONLY).
all_sections=load,generation,prefill,update,train,memory
BENCH_ONLY=${BENCH_ONLY:-$all_sections}
# A subset of sections writes beside the device's full report, not over it (on 2026-11-27 an
# H100's `--only memory` replaced its load-to-train report): outputs/bench/<sections joined by +>.
# A quick (tiny-size) bench likewise: outputs/bench/[<sections>-]quick, as `bench` names it.
part=${BENCH_ONLY//,/+}
[ "$BENCH_ONLY" = "$all_sections" ] && part=
[ -n "${BENCH_QUICK:-}" ] && part=${part:+$part-}quick
BENCH_OUT=${BENCH_OUT:-outputs/bench${part:+/$part}}
CHECK_S=${CHECK_S:-240}
scratch=$(mktemp -d)
ev=$scratch/evidence
mkdir -p "$ev" "$out"
py=$(command -v "${PYTHON:-python3}")
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
export RAGEN_COMMIT=${RAGEN_COMMIT:-unknown}

elapsed() { echo $(($(date +%s) - t0)); }
# A phase runs only with more than 30 s to run in: `timeout 0` means no limit at all, and a
# negative cap is refused by timeout (exit 125) or by the command's own argument check.
room() { [ "$1" -gt 30 ]; }
# Each phase runs in the background and is waited for: `timeout` puts itself and its command in a
# process group of their own, so a script stopped mid-phase (a call's limit) left the phase
# running, writing the outputs the archive was taking and holding the GPU. The EXIT trap now
# stops it first (INT, which timeout passes on), then archives.
phase=
run_phase() {
  "$@" &
  phase=$!
  wait $phase
  local rc=$?
  phase=
  return $rc
}
stop_phase() {
  [ -n "$phase" ] || return 0
  say "stopping the phase in flight (pid $phase)"
  kill -INT $phase 2>/dev/null
  for _ in $(seq 20); do kill -0 $phase 2>/dev/null || return 0; sleep 1; done
  kill -KILL $phase 2>/dev/null
}
left() { echo $((budget - $(elapsed))); }
say() { echo "[evidence $(elapsed) s] $*" | tee -a "$ev/phases.log"; }

archive() {
  stop_phase
  say "archiving (left: $(left) s)"
  tar czf "$out/evidence.tgz" --exclude='ckpt' --exclude='*.pt' --exclude='__pycache__' --exclude='quarantine' \
    outputs/gpu-check outputs/bench $(ls -d "outputs/$PROFILE" 2>/dev/null) -C "$scratch" evidence 2>>"$ev/phases.log"
  ls -la "$out" | tee -a "$ev/phases.log"
  for f in $(find outputs/gpu-check outputs/bench -maxdepth 2 -name '*.md' -newer "$ev/host.txt"); do
    echo "== $f"
    cat "$f"
  done
  tail -5 "$ev/phases.log"
}
# The script's own output, kept aside: stopped mid-phase, the trap runs inside run_phase, whose
# output goes to that phase's log.
exec 3>&1 4>&2
trap 'archive >&3 2>&4' EXIT

say "start: budget $budget s, commit $RAGEN_COMMIT, profile $PROFILE, device $DEVICE"
{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv; } \
  >"$ev/nvidia-smi.txt" 2>&1
nproc >"$ev/host.txt"; free -g >>"$ev/host.txt"; df -h . >>"$ev/host.txt"

# 1. install into the host's own Python (the one with torch; on these images a venv itself, so a
# --system-site-packages venv made from it would not see its torch); make then runs with it
# (HOST_PYTHON) and never builds .venv.
if [ "$bundle" != "-" ]; then
  PYTHON=$py run_phase timeout 150 bash "$bundle/g01/install.sh" >"$ev/install.log" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q "allow-upgrades" "$ev/install.log"; then
    say "install: a host package conflicts; again with --allow-upgrades"
    PYTHON=$py run_phase timeout 150 bash "$bundle/g01/install.sh" --allow-upgrades >>"$ev/install.log" 2>&1
    rc=$?
  fi
  say "install: exit $rc"
  tail -6 "$ev/install.log"
  # install.sh fails at its last step if an optional import (trl) breaks: go on if the run path imports
  "$py" -c "import ragen_lib, gguf, papermill, jupytext, torch; assert torch.cuda.is_available() or '$DEVICE' == 'cpu'" \
    >>"$ev/install.log" 2>&1 || { say "install: the run path does not import (install.log)"; exit 1; }
fi

# 2. gpu-check, with the quick replication beside it (it needs make; gpu-check and bench do not)
rep=
[ -n "${BACKLOG_S:-}" ] && REPLICATE=0 # the backlog trains the replication's runs itself, a lease at a time
if [ "${REPLICATE:-1}" = 0 ]; then
  say "replicate-all: skipped (REPLICATE=0)"
elif command -v make >/dev/null; then
  setsid make replicate-all PROFILE="$PROFILE" HOST_PYTHON="$py" >"$ev/replicate.log" 2>&1 &
  rep=$!
  say "replicate-all started (pid $rep)"
else
  say "replicate-all: skipped, no make on this host"
fi
reserve=${RESERVE_S:-120} # kept for the bench and the archive
if [ "$CHECK_S" -gt 0 ]; then
  cap=$((CHECK_S < $(left) - reserve ? CHECK_S : $(left) - reserve))
  if room $cap; then
    run_phase timeout $cap "$py" -m ragen_lib doctor --device "$DEVICE" >"$ev/gpu-check.log" 2>&1
    say "gpu-check: exit $? (cap $cap s)"
    tail -15 "$ev/gpu-check.log"
  else
    say "gpu-check: skipped, $cap s to run in"
  fi
else
  say "gpu-check: skipped (CHECK_S=0)"
fi

# 3. stop the replication: Ctrl-C to its whole process group, then whatever is left. With
# BENCH_ONLY=none it has the GPU to itself until 40 s before the budget ends.
if [ -n "$rep" ]; then
  if [ "$BENCH_ONLY" = none ]; then
    while [ "$(left)" -gt 40 ] && kill -0 $rep 2>/dev/null; do sleep 2; done
  fi
  kill -INT -- -$rep 2>/dev/null
  for _ in $(seq 8); do kill -0 $rep 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$rep 2>/dev/null
  pkill -KILL -f ipykernel_launcher 2>/dev/null
  sleep 2
  say "replicate-all stopped"
  tail -25 "$ev/replicate.log"
fi

# 3a. the backlog: whole runs, each started only where its estimate fits what is left of BACKLOG_S
if [ -n "${BACKLOG_S:-}" ]; then
  cap=$((BACKLOG_S < $(left) - 60 ? BACKLOG_S : $(left) - 60))
  if room $cap; then
    # --train gets 20 s less than the cap: a run estimated to fit that is late still ends by INT.
    # No checkpoints: none comes back from this host, and quick's are 3.8 GB of writing each.
    run_phase timeout -s INT -k 20 $cap "$py" -m ragen_lib backlog "$PROFILE" --train $((cap - 20)) --no-checkpoints \
      >"$ev/backlog.log" 2>&1
    say "backlog: exit $? (cap $cap s)"
    grep "^\[backlog\]" "$ev/backlog.log"
  else
    say "backlog: skipped, $cap s to run in"
  fi
fi

# 3b. a few steps of one run's config, alone, per setting (and what STEPS_ARGS asks: --pool, --profile)
if [ -n "${STEPS_CONFIG:-}" ]; then
  steps_s=${STEPS_S:-150}
  cap=$((steps_s + 30 < $(left) - 60 ? steps_s + 30 : $(left) - 60))
  if room $cap; then
    # shellcheck disable=SC2086 # STEPS_ARGS is a list of options
    run_phase timeout -k 10 $cap "$py" scripts/step_profile.py "$STEPS_CONFIG" "$ev/steps" --budget "$steps_s" \
      ${STEPS_ARGS:-} >"$ev/steps.log" 2>&1
    say "steps: exit $? (cap $cap s)"
    grep "^\[steps\]" "$ev/steps.log"
  else
    say "steps: skipped, $cap s to run in"
  fi
fi

# 4. bench, alone on the GPU
cap=$(($(left) - 45))
if room $cap && [ "$BENCH_ONLY" != none ]; then
  run_phase timeout -s INT -k 15 $cap "$py" -m ragen_lib bench --device "$DEVICE" --only "$BENCH_ONLY" --out "$BENCH_OUT" \
    ${BENCH_QUICK:+--quick} >"$ev/bench.log" 2>&1
  say "bench: exit $? (cap $cap s)"
  grep "^\[bench\]" "$ev/bench.log" | tail -40
else
  say "bench: skipped, $cap s left"
fi

# 5. the report of what the replication finished
run_phase timeout 20 "$py" -m ragen_lib report "$PROFILE" >"$ev/report.log" 2>&1
say "report: exit $?"

#!/usr/bin/env bash
# hostfiles/train_dp.pbs without PBS (Debian has no PBS packages): run as PBS runs it — its
# environment ($PBS_NODEFILE naming this machine twice, $PBS_O_WORKDIR, $PBS_JOBID) and a
# `qsub` that records what it is asked to submit. The walltime stop comes early
# (STOP_AFTER=8s): the ranks save the step they stop at and rank 0 says which, the script
# submits itself again with its settings, and running that submission resumes from that step
# and ends at the last step.
#   tests/pbs_script.sh SOURCE_DIR BUILD_DIR DATA_DIR
set -euo pipefail
source_dir=$1 build_dir=$2 data_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; cat "$work"/run*.out >&2 2> /dev/null || true; exit 1; }

mkdir -p "$work/bin"
cat > "$work/bin/qsub" << EOF
#!/bin/sh
printf '%s\n' "\$@" > "$work/qsub.args"
echo 2.pbs-test
EOF
chmod +x "$work/bin/qsub"
printf 'localhost\nlocalhost\n' > "$work/nodefile"
run_job() {  # $1: job id; the rest: the job's environment (qsub -v)
  local id=$1
  shift
  (cd "$HOME" && env PATH="$work/bin:$PATH" PBS_NODEFILE="$work/nodefile" PBS_O_WORKDIR="$source_dir" \
    PBS_JOBID="$id" "$@" bash "$source_dir/hostfiles/train_dp.pbs") > "$work/run$id.out" 2>&1
}

# A TRAIN_DP_ARGS that is not shell words (an unbalanced quote): one line naming it, exit 2.
status=0
run_job 0 OUT_DIR="$work/bad" DATA_DIR="$data_dir" BUILD_DIR="$build_dir" TRAIN_DP_ARGS="--prompt 'abc" || status=$?
[ "$status" -eq 2 ] || fail "an unbalanced quote in TRAIN_DP_ARGS gave status $status, not 2"
grep -q "train_dp.pbs: TRAIN_DP_ARGS is not a list of shell words" "$work/run0.out" || fail "TRAIN_DP_ARGS not named"

# The first job: stopped before its "walltime", submits itself again.
run_job 1 STOP_AFTER=8s CKPT_INTERVAL=20 OUT_DIR="$work/out" DATA_DIR="$data_dir" BUILD_DIR="$build_dir" \
  TRAIN_DP_ARGS="--max-iters 100000 --n-layer 1 --n-embd 32 --log-interval 20 --eval-interval 0 --sample-tokens 40 --prompt 'to be%2C or'" ||
  fail "the first job exited with $?"
note=$(grep "interrupted at step" "$work/run1.out") || fail "rank 0 did not say where it stopped"
echo "$note"
stopped_at=$(sed -n 's/.*the last checkpoint (step \([0-9]*\)).*/\1/p' <<< "$note")
[ -n "$stopped_at" ] && [ "$stopped_at" -ge 1 ] || fail "no checkpoint step in: $note"
# Nothing finished is lost: the ranks saved the step they stopped at (not the last multiple of
# --ckpt-interval), and the script says it.
[[ $note == "interrupted at step $stopped_at;"* ]] || fail "the stop did not save the step it stopped at: $note"
grep -q "stopped before its walltime at step $stopped_at " "$work/run1.out" || fail "the script did not say step $stopped_at"
grep -q "submitting it again to resume" "$work/run1.out" || fail "the job did not submit itself again"
[ -f "$work/qsub.args" ] || fail "qsub was not called"
[ "$(sed -n 1p "$work/qsub.args")" = -v ] || fail "qsub got no -v: $(cat "$work/qsub.args")"
variables=$(sed -n 2p "$work/qsub.args")
grep -q "TRAIN_DP_ARGS=--max-iters 100000 --n-layer 1 --n-embd 32 --log-interval 20" <<< "$variables" || fail "qsub -v lost TRAIN_DP_ARGS: $variables"
grep -q "OUT_DIR=$work/out" <<< "$variables" || fail "qsub -v lost OUT_DIR: $variables"
# The comma inside --prompt's value travels encoded: -v's list splits into whole variables.
grep -q "TRAIN_DP_ARGS=.*--prompt 'to be%2C or'" <<< "$variables" || fail "qsub -v would cut the prompt at its comma: $variables"
[ "$(sed -n 3p "$work/qsub.args")" = "$source_dir/hostfiles/train_dp.pbs" ] || fail "qsub submits $(sed -n 3p "$work/qsub.args")"

# The second job, as qsub would start it (its -v variables; a shorter run so that it ends).
IFS=, read -r -a submitted <<< "$variables"
prompt=""
for variable in "${submitted[@]}"; do  # the submitted prompt, with a shorter run
  [[ $variable == TRAIN_DP_ARGS=* ]] && prompt=$(sed -n "s/.*\(--prompt '.*'\).*/\1/p" <<< "$variable")
done
run_job 2 "${submitted[@]}" TRAIN_DP_ARGS="--max-iters $((stopped_at + 20)) --sample-tokens 40 $prompt" ||
  fail "the resubmitted job exited with $?"
grep -q "pbs: job 2 resumes $work/out/checkpoint" "$work/run2.out" || fail "the resubmitted job did not resume"
grep -q "resuming from $work/out/checkpoint at step $stopped_at of $((stopped_at + 20))" "$work/run2.out" ||
  fail "train_dp did not resume at step $stopped_at"
grep -q "val_loss_full=" "$work/run2.out" || fail "no final val loss"
grep -q "^to be, or" "$work/run2.out" || fail "the sample does not start from the prompt with its comma"
echo "train_dp.pbs: stopped at step $stopped_at's checkpoint, submitted itself again, resumed, ended at step $((stopped_at + 20))"

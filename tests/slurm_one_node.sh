#!/usr/bin/env bash
# hostfiles/train_dp.sbatch under a real Slurm: a one-node cluster made here (munged,
# slurmctld and slurmd from Debian's packages, on a private socket, ports and spool folder),
# the script submitted with 1 node × 2 ranks, the time-limit warning sent as Slurm sends it
# (USR1 to the batch script only, `--signal=B:USR1@…`), then: the ranks save the step they
# stop at, the script says which and requeues the job, and the job starts again, resumes from
# that step and ends at the last step.
#   tests/slurm_one_node.sh SOURCE_DIR BUILD_DIR DATA_DIR
# Exit 77 (skipped) when not root or Slurm's programs are missing.
set -euo pipefail
source_dir=$1 build_dir=$2 data_dir=$3
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "a one-node Slurm cluster needs root (slurmd runs jobs as their user)"
for program in munged slurmctld slurmd sbatch scontrol sinfo; do
  command -v "$program" > /dev/null || skip "$program is missing (Debian: munge, slurmctld, slurmd, slurm-client)"
done

work=$(mktemp -d)
export SLURM_CONF=$work/slurm.conf
stop_cluster() {
  scancel --quiet --full "$(cat "$work/job" 2>/dev/null)" 2> /dev/null || true
  for daemon in slurmd slurmctld; do
    if [ -f "$work/$daemon.pid" ]; then kill "$(cat "$work/$daemon.pid")" 2> /dev/null || true; fi
  done
  munged --stop --socket="$work/munge.socket" > /dev/null 2>&1 || true
  sleep 0.5
  rm -rf "$work"
}
trap stop_cluster EXIT
# ctest ends a test past its timeout with SIGKILL, which skips the EXIT trap, and the daemons
# have left our process tree: a reaper outside it (double fork, own session) stops the cluster
# once this shell is gone. After a normal exit it finds nothing left to stop.
export work
export -f stop_cluster
( setsid bash -c 'while kill -0 '$$' 2> /dev/null; do sleep 2; done; stop_cluster' < /dev/null > /dev/null 2>&1 & )
fail() {
  echo "FAILED: $*" >&2
  echo "---- job output" >&2; cat "$work/job.out" >&2 2> /dev/null || true
  echo "---- slurmctld/slurmd logs (last lines)" >&2; tail -n 5 "$work"/*.log >&2 2> /dev/null || true
  exit 1
}

# munge: the credentials slurmctld and slurmd check, with a key of our own.
dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge.key"
munged --force --socket="$work/munge.socket" --key-file="$work/munge.key" --pid-file="$work/munged.pid" \
  --log-file="$work/munged.log" --seed-file="$work/munged.seed"

node=$(hostname -s)
mkdir -p "$work/spool" "$work/state"
write_conf() {
cat > "$SLURM_CONF" << EOF
ClusterName=nanodist-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$work/munge.socket,cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}
# Ports below Linux's ephemeral range (32768-60999), so no other test's outgoing connection
# holds one, and a pair nobody listens on. A controller that still cannot bind exits at once
# ("Address already in use" in its log): then the cluster starts again on another pair.
listening() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
start_cluster() {
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 12000))
    if listening "$port" || listening $((port + 1)); then continue; fi
    write_conf
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF"
    for _ in $(seq 60); do
      [ "$(timeout 10 sinfo --noheader --format=%t 2> /dev/null)" = idle ] && return 0
      pgrep -f "slurmctld -f $SLURM_CONF" > /dev/null || break
      sleep 0.5
    done
    pkill -f "slurmd -f $SLURM_CONF" || true
    pkill -f "slurmctld -f $SLURM_CONF" || true
    sleep 0.5
  done
  return 1
}
start_cluster || fail "the node did not come up: $(timeout 10 sinfo 2>&1)"
echo "one-node Slurm cluster up: $(sinfo --noheader)"

# The script as a user submits it, from the checkout; 1 node × 2 ranks instead of 2 × 2.
out_dir=$work/out
(cd "$source_dir" && OUT_DIR=$out_dir DATA_DIR=$data_dir BUILD_DIR=$build_dir CKPT_INTERVAL=20 \
  TRAIN_DP_ARGS="--max-iters 300 --log-interval 20 --eval-interval 0 --sample-tokens 40" \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --output="$work/job.out" hostfiles/train_dp.sbatch) > "$work/job"
job=$(cat "$work/job")
job_state() { scontrol show job "$job" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
batch_script="$work/spool/job$(printf '%05d' "$job")/slurm_script"

# Once the first checkpoint is written: the warning, to the batch script alone.
for _ in $(seq 600); do
  [ -f "$out_dir/checkpoint/state.json" ] && pgrep -f "$batch_script" > /dev/null && break
  [ "$(job_state)" = PENDING ] || [ "$(job_state)" = RUNNING ] || fail "job $job is $(job_state) before its first checkpoint"
  sleep 0.2
done
pkill -USR1 -f "$batch_script" || fail "no batch script $batch_script to warn"
for _ in $(seq 120); do
  scontrol show job "$job" | grep -q "Restarts=1" && break
  sleep 0.5
done
scontrol show job "$job" | grep -q "Restarts=1" || fail "job $job was not requeued after the warning"
stopped_line=$(grep "sbatch: stopped at step" "$work/job.out") || fail "no line saying where it stopped"
echo "$stopped_line"
stopped_at=$(sed -n 's/.*stopped at step \([0-9]*\);.*/\1/p' <<< "$stopped_line")
[ -n "$stopped_at" ] && [ "$stopped_at" -ge 1 ] && [ "$stopped_at" -lt 300 ] ||
  fail "stopped at step '$stopped_at', expected between 1 and 300"
# Nothing finished is lost: rank 0's note names the step it stopped at as the one it saved.
grep -q "interrupted at step $stopped_at; the last checkpoint (step $stopped_at)" "$work/job.out" ||
  fail "rank 0 did not say that it saved step $stopped_at, where it stopped"

# Slurm holds a requeued job until its old credential expires (cred_expire: 120 s by
# default, 10 s here), then starts it again.
for _ in $(seq 600); do
  case "$(job_state)" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
  sleep 0.5
done
[ "$(job_state)" = COMPLETED ] || fail "the requeued job ended $(job_state)"
grep -q "sbatch: job $job resumes $out_dir/checkpoint" "$work/job.out" || fail "the requeued job did not resume"
grep -q "resuming from $out_dir/checkpoint at step $stopped_at of 300" "$work/job.out" ||
  fail "train_dp did not resume at step $stopped_at"
grep -q "step 300/300" "$work/job.out" || fail "no step 300"
grep -q "val_loss_full=" "$work/job.out" || fail "no final val loss"
grep -q '"steps": 300' "$out_dir/checkpoint/state.json" || fail "the final checkpoint is not at step 300"
echo "train_dp.sbatch: stopped at the warning with checkpoint step $stopped_at, requeued, resumed, ended at step 300"

#!/usr/bin/env bash
# The tutorial's launcher: examples/pytorch/ddp_tutorial.py under torchrun (2 processes on this
# machine), on gloo and on nanodist as a user starts it (no NANODIST_BACKEND: shm, its processes
# joined through the store torchrun passes and grouped by host, so they share memory): the losses
# of every step and the final weights the same.
# One node with a port we choose rather than --standalone: torchrun's agent then holds the store
# and the workers only connect. --standalone has the workers bind a port drawn from the ephemeral
# range, which a test running beside this one can take first ("Address already in use").
# torch 1.13's torchrun fails on Python 3.11 unless given --redirects, --tee and --log_dir
# ("'NoneType' object has no attribute 'get'"): docs/pytorch.md.
#   torchrun_same_losses.sh SOURCE_DIR PYTHON
set -euo pipefail
source_dir=$1 python=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for backend in gloo nanodist; do
  port=$("$python" "$source_dir/tests/torch_backend/free_port.py")
  env -u NANODIST_BACKEND "$python" -m torch.distributed.run --nnodes 1 --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port "$port" \
    --redirects 1 --tee 1 --log_dir "$work/logs_$backend" \
    "$source_dir/examples/pytorch/ddp_tutorial.py" --backend $backend > "$work/$backend.out" 2>&1 ||
    { status=$?; cat "$work/$backend.out"; echo "FAILED: torchrun on $backend exited with $status"; exit 1; }
done
grep -q "backend nanodist" "$work/nanodist.out" || { cat "$work/nanodist.out"; echo "FAILED: not run on nanodist"; exit 1; }
grep -q "backend shm: 2 ranks on one node" "$work/nanodist.out" ||
  { cat "$work/nanodist.out"; echo "FAILED: nanodist's default under torchrun is not shared memory on one node"; exit 1; }
lines() { grep -E "^\[default0\]:(step|done)" "$1" | sed 's/backend [a-z]*/backend X/'; }
if [ "$(lines "$work/gloo.out" | grep -c step)" -lt 10 ] || ! diff <(lines "$work/gloo.out") <(lines "$work/nanodist.out"); then
  echo "FAILED: under torchrun, gloo and nanodist differ"
  exit 1
fi
echo "torchrun: $(lines "$work/nanodist.out" | grep -c step) steps, the same losses and weights on gloo and nanodist"

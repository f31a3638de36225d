#!/usr/bin/env bash
# Two "machines" on this one, to try multi-host MPI without a second computer.
#
#   sudo scripts/two_hosts.sh mpiexec --hostfile '$NANODIST_HOSTFILE' -n 4 build/examples/allreduce
#   sudo scripts/two_hosts.sh --check          # can the hosts be made here? (exit 0 yes, 77 no)
#
# Each host is a network namespace with its own hostname (UTS namespace) and its own
# /dev/shm (mount namespace + tmpfs), so OpenMPI sees two nodes: ranks on different hosts
# talk TCP over a veth pair (a virtual cable: 10.77.0.1 <-> 10.77.0.2), never shared memory.
#
#   host A "nanodist-a"  veth 10.77.0.1/24  <---- veth pair ---->  veth 10.77.0.2/24  host B "nanodist-b"
#
# The command runs on host A, with these set for it:
#   NANODIST_HOSTFILE  a hostfile of the two addresses, 2 slots each (--slots N to change)
#   NANODIST_LOSE_HOST_B  a command that loses host B as a machine is lost: every process on it
#                      killed (its ranks, its MPI daemon), and no new one can start there
#   OMPI_MCA_*         remote ranks start through nsenter (the "ssh" of these hosts), TCP on the veth
# Quote '$NANODIST_HOSTFILE' so that it is expanded on host A. Everything is torn down when the
# command ends, fails or is interrupted; the exit status is the command's.
set -euo pipefail

slots=2
check_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --slots)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "two_hosts: --slots needs a positive number, got '${2:-}'" >&2; exit 2; }
      slots="$2"; shift 2 ;;
    --check) check_only=1; shift ;;
    --help|-h) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done

# Exit status 77: "cannot be done here" (ctest reports such a test as skipped).
refuse() { echo "two_hosts: $*" >&2; exit 77; }
[ "$EUID" -eq 0 ] || refuse "must run as root (network namespaces need it): try sudo"
for tool in ip unshare nsenter; do
  command -v "$tool" >/dev/null || refuse "'$tool' is missing (Debian: apt install iproute2 util-linux)"
done
if [ "$check_only" -eq 0 ] && [ $# -eq 0 ]; then
  echo "two_hosts: no command given (usage: two_hosts.sh [--slots N] COMMAND...)" >&2
  exit 2
fi

# Unique names, so that two runs at once (ctest -j) do not meet.
tag="nd$$"
work="$(mktemp -d /tmp/nanodist-two-hosts.XXXXXX)"
holders=()
teardown() {
  for pid in "${holders[@]}"; do kill "$pid" 2>/dev/null || true; done
  ip netns del "${tag}a" 2>/dev/null || true  # deleting a namespace deletes its end of the veth, and so the pair
  ip netns del "${tag}b" 2>/dev/null || true
  rm -rf "$work"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "${tag}a" 2>/dev/null || refuse "cannot create a network namespace (ip netns add failed: a container without CAP_SYS_ADMIN?)"
ip netns add "${tag}b" || refuse "cannot create a second network namespace"
ip link add veth0 netns "${tag}a" type veth peer name veth0 netns "${tag}b" ||
  refuse "cannot create a veth pair (is the veth kernel module available?)"
for host in a b; do
  address=10.77.0.$([ "$host" = a ] && echo 1 || echo 2)
  ip -n "${tag}${host}" addr add "$address/24" dev veth0
  ip -n "${tag}${host}" link set veth0 up
  ip -n "${tag}${host}" link set lo up
  # The holder keeps the host's UTS and mount namespaces alive; commands enter them by its pid.
  ip netns exec "${tag}${host}" unshare --uts --mount --propagation private -- \
    sh -c "hostname nanodist-$host && mount -t tmpfs -o size=2g tmpfs /dev/shm && touch $work/ready-$host && exec sleep infinity" &
  holders+=($!)
  echo "$!" > "$work/pid-$address"
done
for host in a b; do
  for _ in $(seq 100); do [ -f "$work/ready-$host" ] && break; sleep 0.05; done
  [ -f "$work/ready-$host" ] || refuse "cannot give host $host its own hostname and /dev/shm (unshare --uts --mount failed)"
done
if [ "$check_only" -eq 1 ]; then
  echo "two_hosts: two hosts can be made here"
  exit 0
fi

# The launch agent: OpenMPI calls it as it would call ssh, "agent [options] HOST COMMAND...".
cat > "$work/agent" <<EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done   # ssh options OpenMPI may pass
host="\$1"; shift
exec nsenter --target "\$(cat $work/pid-\$host)" --net --uts --mount --wd="\$PWD" -- sh -c "\$*"
EOF
chmod +x "$work/agent"
printf '10.77.0.1 slots=%s\n10.77.0.2 slots=%s\n' "$slots" "$slots" > "$work/hostfile"
cat > "$work/lose-host-b" <<EOF
#!/bin/sh
# Host B is gone: its processes killed (the holder too, so the agent cannot enter it again).
rm -f $work/pid-10.77.0.2
for pid in \$(ip netns pids ${tag}b); do kill -9 "\$pid" 2>/dev/null; done
EOF
chmod +x "$work/lose-host-b"

export NANODIST_HOSTFILE="$work/hostfile"
export NANODIST_LOSE_HOST_B="$work/lose-host-b"
export OMPI_MCA_plm_rsh_agent="$work/agent"
export OMPI_MCA_btl="self,vader,tcp"
export OMPI_MCA_btl_tcp_if_include="10.77.0.0/24"
export OMPI_MCA_oob_tcp_if_include="10.77.0.0/24"
status=0
nsenter --target "${holders[0]}" --net --uts --mount --wd="$PWD" -- sh -c "$*" || status=$?
exit "$status"

# Shared by the tests that emulate hosts with network namespaces (sourced;
# not a test itself: CTest runs tests/*.sh only). Needs $data and a skip
# function; makes $tmp (a temp dir), a bridge and three hosts, namespaces strata-PID-{0,1,2}
# with addresses $net.10-12 (in ${hosts[@]}); mkhost adds more; the cleanup
# trap removes every namespace, veth and bridge made, and every process left
# in them, and $tmp. netns_small_data DIR writes the first 3840/960
# Fashion-MNIST examples as a small IDX set. netns_launch_host adds the launch
# host L ($net.2, net.ipv4.tcp_retries2 = 2) and sets mpi=(...): mpirun run
# there, starting one process per host through $tmp/agent.sh, a stand-in for
# ssh, with OpenMPI's traffic on the veths only (mpi_base: the same without
# -H, for a subset of the hosts).
id=$$ # names carry the test's pid: parallel runs cannot clash
br=snb$id
tmp=$(mktemp -d)
nss=() vhs=() mpipid=
cleanup() {
  [ -n "${mpipid:-}" ] && kill -9 "$mpipid" 2>/dev/null
  for ns in "${nss[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for v in "${vhs[@]}"; do ip link del "$v" 2>/dev/null; done # deletes both ends
  for ns in "${nss[@]}"; do ip netns del "$ns" 2>/dev/null; done
  ip link del "$br" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# a 10.77.X.0/24 that no interface or route here uses yet
net=
for k in $(seq 0 252); do
  x=$(( (id + k) % 253 + 2 ))
  if ! ip -4 route | grep -q "^10\.77\.$x\." && ! ip -4 addr | grep -q " 10\.77\.$x\."; then net=10.77.$x; break; fi
done
[ -n "$net" ] || skip "no free 10.77.X.0/24 subnet"
# host i: namespace strata-PID-i, address NET.1i; the launch host L: NET.2
mkhost() { # mkhost NAME ADDR
  local ns=strata-$id-$1 vh=sn${id}h$1 vp=sn${id}p$1
  ip netns add "$ns" 2>"$tmp/ip.err" || return 1
  nss+=("$ns")
  ip link add "$vh" type veth peer name "$vp" 2>>"$tmp/ip.err" || return 1
  vhs+=("$vh")
  ip link set "$vp" netns "$ns" && ip link set "$vh" master "$br" up &&
    ip -n "$ns" addr add "$2/24" dev "$vp" && ip -n "$ns" link set "$vp" up &&
    ip -n "$ns" link set lo up 2>>"$tmp/ip.err"
}
ip link add "$br" type bridge 2>"$tmp/ip.err" || skip "cannot create a bridge: $(cat "$tmp/ip.err")"
ip link set "$br" up
hosts=()
for i in 0 1 2; do
  mkhost $i $net.1$i || skip "cannot create namespace/veth: $(cat "$tmp/ip.err")"
  hosts+=($net.1$i)
  echo "strata-$id-$i $i" >"$tmp/map.$net.1$i"
done
netns_small_data() {
python3 - "$data" "$1" <<'P'
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
for name, n in (("train", 3840), ("t10k", 960)):
    for kind, item in (("images-idx3", 784), ("labels-idx1", 1)):
        raw = gzip.open(f"{src}/{name}-{kind}-ubyte.gz").read()
        dims = raw[3]
        head = raw[:4] + struct.pack(">I", n) + raw[8:4 + 4 * dims]
        with gzip.open(f"{dst}/{name}-{kind}-ubyte.gz", "wb", compresslevel=1) as f:
            f.write(head + raw[4 + 4 * dims:4 + 4 * dims + n * item])
P
}
netns_launch_host() {
  mkhost L $net.2 || skip "cannot create namespace/veth: $(cat "$tmp/ip.err")"
  launch=strata-$id-L
  ip netns exec "$launch" sysctl -q -w net.ipv4.tcp_retries2=2 ||
    skip "cannot set net.ipv4.tcp_retries2 in a namespace"
  # the stand-in for ssh: HOST COMMAND... runs COMMAND in HOST's namespace,
  # pinned to one core, with its own session directory (the daemons of one
  # machine would otherwise share /tmp/ompi.HOSTNAME and race on it)
  cat >"$tmp/agent.sh" <<EOF
#!/bin/sh
read ns i <"$tmp/map.\$1"; shift
mkdir -p "$tmp/session.\$ns"
export OMPI_MCA_orte_tmpdir_base="$tmp/session.\$ns"
exec ip netns exec "\$ns" taskset -c \$((i % $(nproc))) /bin/sh -c "\$*"
EOF
  chmod +x "$tmp/agent.sh"
  hostlist=$(IFS=,; echo "${hosts[*]}")
  mpi_base=(ip netns exec "$launch" mpirun --bind-to none --mca plm_rsh_agent "$tmp/agent.sh"
            --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24)
  mpi=("${mpi_base[@]}" -H "$hostlist")
}

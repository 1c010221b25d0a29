# Sourced by the bench scripts (bash), before they change directory: re-executes the calling script in a fresh network namespace
# that has only loopback (`unshare -n`, root only), so that no process of the bench can reach this
# machine's DNS resolver. Why: torch 2.13's libuv TCPStore server resolves the name of every peer
# it accepts (a reverse lookup, on its one loop thread); on the build VM that lookup goes to a
# resolver that answers in ~15 ms and drops some queries (5 s timeout each), which would charge the
# anchor for the VM's DNS. With no route out, the lookup fails at once for every process alike.
# DGT_BENCH_NETNS=0 runs in the current namespace; without unshare's permission the bench says so
# and runs in the current namespace.
if [[ ${DGT_BENCH_NETNS:-1} == 1 && -z ${DGT_BENCH_IN_NETNS:-} ]]; then
  if unshare -n true 2>/dev/null; then
    export DGT_BENCH_IN_NETNS=1
    exec unshare -n bash -c 'ip link set lo up && exec "$0" "$@"' "$(readlink -f "$0")" "$@"
  fi
  echo "bench: cannot create a network namespace (unshare -n); running in the current one" >&2
fi
if [[ -n ${DGT_BENCH_IN_NETNS:-} ]]; then
  echo "bench: in a loopback-only network namespace (DGT_BENCH_NETNS=0 to run without)" >&2
fi

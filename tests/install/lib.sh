# Shared by the installed-prefix tests (sourced). Needs $tmp; sets server_pid and port.

# start_store_server: starts the installed `dgt store serve` on a free loopback port and waits
# (up to 10 s) for the port it prints.
start_store_server() {
  "$tmp/prefix/bin/dgt" store serve --listen 127.0.0.1:0 > "$tmp/serve.out" 2> "$tmp/serve.err" &
  server_pid=$!
  port=
  for _ in $(seq 100); do
    port=$(sed -n 's/^dgt store listening on port \([0-9]*\)$/\1/p' "$tmp/serve.out")
    [[ -n $port ]] && return 0
    sleep 0.1
  done
  echo "FAIL: dgt store serve did not start" >&2
  cat "$tmp/serve.err" >&2
  exit 1
}

#!/usr/bin/env bash
# Builds the dgt .deb from the build directory (cpack, into a temporary directory), extracts it
# (dpkg-deb -x; nothing is installed on this machine) and checks it:
#   - its exact file list (tests/install/deb-files.txt), every entry root/root;
#   - control: name, version, every NEEDED library of every binary covered by Depends;
#   - every binary prints "NAME VERSION" for --version from the extracted tree, and has a man page;
#   - the sysusers.d and tmpfiles.d entries create the dgt user and its directories in a scratch root;
#   - every unit starts a binary of the package, passes `systemd-analyze verify` (paths moved to the
#     extracted tree) and its `systemd-analyze security --offline=true` exposure is at or under the
#     bound recorded in docs/OPERATIONS.md's table;
#   - `cmake --install --prefix` installs the same files, its units starting that prefix's binaries;
#   - the Python package and the pkg-config files work from the extracted tree.
# Usage: deb_test.sh SOURCE_DIR BUILD_DIR VERSION WITH_MAN(ON|OFF) WITH_NCCL(ON|OFF) [WITH_AGENT]
# (WITH_AGENT ON|OFF, default ON: whether the build makes dgt-agent, the [agent] entries of
# deb-files.txt.)
set -euo pipefail
src=$1
build=$2
version=$3
with_man=$4
with_nccl=$5
with_agent=${6:-ON}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [[ $with_man != ON && -n ${CI:-} ]]; then
  fail "no man pages in this build: help2man missing (scripts/install-deps.sh installs it)"
fi

timeout 300 cpack --config "$build/CPackConfig.cmake" -B "$tmp/out" > "$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log" >&2; fail "cpack"; }
deb=$tmp/out/dgt_${version}_$(dpkg --print-architecture).deb
[[ -f $deb ]] || fail "cpack made no $deb: $(ls "$tmp/out")"

# File list: mode and path, exactly the expected ones (in path order).
expected=$(grep -v '^#' "$src/tests/install/deb-files.txt" |
  { if [[ $with_man == ON ]]; then cat; else grep -v '\[man\]'; fi; } |
  { if [[ $with_nccl == ON ]]; then cat; else grep -v '\[nccl\]'; fi; } |
  { if [[ $with_agent == ON ]]; then cat; else grep -v '\[agent\]'; fi; } |
  sed -E 's/\[[a-z]+\] *//g' | LC_ALL=C sort -k2)
listing=$(dpkg-deb -c "$deb")
actual=$(awk '{print $1, $6}' <<<"$listing" | LC_ALL=C sort -k2)
if [[ $actual != "$expected" ]]; then
  diff <(echo "$expected") <(echo "$actual") >&2 || true
  fail "file list of the .deb differs from tests/install/deb-files.txt (- expected, + actual)"
fi
entry_owners=$(awk '{print $2}' <<<"$listing" | sort -u)
[[ $entry_owners == root/root ]] || fail "entries not owned by root/root: $entry_owners"

# Control fields.
[[ $(dpkg-deb -f "$deb" Package) == dgt ]] || fail "Package: $(dpkg-deb -f "$deb" Package)"
[[ $(dpkg-deb -f "$deb" Version) == "$version" ]] || fail "Version: $(dpkg-deb -f "$deb" Version)"
# Depends as one package name a line (alternatives "a | b" split, versions dropped).
depends=$(dpkg-deb -f "$deb" Depends | tr ',|' '\n\n' | sed 's/^ *//; s/ .*//')
root=$tmp/root
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$tmp/control"
for script in postinst prerm postrm; do
  [[ $(stat -c %a "$tmp/control/$script") == 755 ]] || fail "maintainer script $script not 0755"
  sh -n "$tmp/control/$script" || fail "maintainer script $script: syntax"
done
# The maintainer scripts' systemd actions, run with logging stand-ins for the commands they call
# and /run/systemd/system moved into $tmp (systemd "running"): an upgrade (configure OLD-VERSION)
# try-restarts the service onto the new binary, a first install starts nothing, prerm stops it
# only on remove.
stubs=$tmp/stubs
mkdir -p "$stubs" "$tmp/run-systemd"
for cmd in systemctl deb-systemd-invoke systemd-sysusers systemd-tmpfiles; do
  printf '#!/bin/sh\necho "%s $*" >> "%s"\n' "$cmd" "$tmp/actions" > "$stubs/$cmd"
  chmod +x "$stubs/$cmd"
done
maint_actions() {  # SCRIPT ARGS...: the commands the script ran that touch the service
  local script=$1
  shift
  sed "s|/run/systemd/system|$tmp/run-systemd|g" "$tmp/control/$script" > "$tmp/$script.test"
  : > "$tmp/actions"
  PATH=$stubs:$PATH sh "$tmp/$script.test" "$@" || fail "$script $*: exit $?"
  grep -v '^systemd-sysusers\|^systemd-tmpfiles\|daemon-reload' "$tmp/actions" || true
}
[[ $(maint_actions postinst configure 0.0.9) == "deb-systemd-invoke try-restart dgt-rendezvous.service" ]] ||
  fail "postinst on upgrade: $(cat "$tmp/actions")"
[[ -z $(maint_actions postinst configure) ]] || fail "postinst on install: $(cat "$tmp/actions")"
[[ $(maint_actions prerm remove) == "deb-systemd-invoke stop dgt-agent.service dgt-rendezvous.service" ]] ||
  fail "prerm remove: $(cat "$tmp/actions")"
[[ -z $(maint_actions prerm upgrade 0.1.0) ]] || fail "prerm upgrade: $(cat "$tmp/actions")"
mapfile -t binaries < <(find "$root/usr/bin" -type f -printf '%f\n' | sort)
[[ ${#binaries[@]} -ge 3 ]] || fail "binaries: ${binaries[*]}"
# Every library a binary names (NEEDED) comes from a package that Depends lists, or that provides
# a name Depends lists (libspdlog1.10 provides libspdlog1.10-fmt9). One dpkg -S for all of them.
needed=$(for bin in "${binaries[@]}"; do
  readelf -d "$root/usr/bin/$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
done | sort -u)
mapfile -t patterns < <(sed 's|^|*/|' <<<"$needed")
owners=$({ dpkg -S "${patterns[@]}" 2>/dev/null || true; } | sed 's/^\([^:]*\)\(:[a-z0-9]*\)\?: .*\/\([^/]*\)$/\3 \1/')
for lib in $needed; do
  pkgs=$(awk -v l="$lib" '$1 == l {print $2}' <<<"$owners" | sort -u)
  [[ -n $pkgs ]] || fail "the binaries need $lib, which no installed package holds"
  found=
  for pkg in $pkgs; do
    for name in $pkg $(dpkg-query -W -f='${Provides}' "$pkg" | tr ',' '\n' | sed 's/ .*//'); do
      if grep -qxF "$name" <<<"$depends"; then found=$name; fi
    done
  done
  [[ -n $found ]] || fail "the binaries need $lib (package $pkgs), not in Depends: $(dpkg-deb -f "$deb" Depends)"
done
for bin in "${binaries[@]}"; do
  out=$(timeout 10 "$root/usr/bin/$bin" --version) || fail "$bin --version exited $?"
  [[ $out == "$bin $version" ]] || fail "$bin --version printed '$out'"
  if [[ $with_man == ON ]]; then
    page=$root/usr/share/man/man1/$bin.1.gz
    [[ -f $page ]] || fail "no man page $page"
    title=$(zcat "$page" | sed -n 's/^\.TH \([^ ]*\) "1" "[^"]*" "\([^"]*\)".*/\1 \2/p')
    [[ $title == "${bin^^} $bin $version" ]] || fail "$bin man page title: '$title'"
  fi
done

# The dgt user and its directories, created in the extracted tree as postinst does on a system.
mkdir -p "$root/etc"
systemd-sysusers --root="$root" dgt.conf > "$tmp/sysusers.log" 2>&1 ||
  { cat "$tmp/sysusers.log" >&2; fail "systemd-sysusers"; }
user=$(grep '^dgt:' "$root/etc/passwd") || fail "no dgt user in $(cat "$root/etc/passwd")"
IFS=: read -r _ _ uid gid gecos home shell <<<"$user"
((uid > 0 && uid < 1000)) || fail "dgt user id $uid is not a system user's"
[[ $home == /var/lib/dgt && $shell == /usr/sbin/nologin ]] || fail "dgt user: $user"
[[ $gecos == "dgt distributed-training launcher" ]] || fail "dgt user: $user"
systemd-tmpfiles --root="$root" --create dgt.conf > "$tmp/tmpfiles.log" 2>&1 ||
  { cat "$tmp/tmpfiles.log" >&2; fail "systemd-tmpfiles"; }
for dir in /var/lib/dgt /var/log/dgt /var/lib/dgt/jobs; do
  got=$(stat -c '%a %u %g' "$root$dir") || fail "tmpfiles.d made no $dir"
  [[ $got == "750 $uid $gid" ]] || fail "$dir: mode uid gid $got, want 750 $uid $gid"
done

# Units: each starts a binary of the package, verifies, and is at or under its recorded exposure.
mapfile -t units < <(find "$root/usr/lib/systemd/system" -name '*.service' -printf '%f\n' | sort)
[[ ${#units[@]} -ge 1 ]] || fail "no systemd units in the package"
mkdir "$tmp/units"
for unit in "${units[@]}"; do
  exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$root/usr/lib/systemd/system/$unit")
  [[ $exec_start == /usr/bin/* && -x $root$exec_start ]] ||
    fail "$unit: ExecStart=$exec_start is not a binary of the package"
  sed "s|/usr/bin/|$root/usr/bin/|g" "$root/usr/lib/systemd/system/$unit" > "$tmp/units/$unit"
  # MANPATH: Documentation=man:... must name a man page of the package.
  MANPATH=$root/usr/share/man timeout 60 systemd-analyze verify "$tmp/units/$unit" \
    > "$tmp/verify.log" 2>&1 || { cat "$tmp/verify.log" >&2; fail "systemd-analyze verify $unit"; }
  [[ ! -s $tmp/verify.log ]] || { cat "$tmp/verify.log" >&2; fail "systemd-analyze verify $unit warns"; }
  score=$(timeout 60 systemd-analyze security --offline=true "$tmp/units/$unit" 2>&1 |
    sed -n "s/^→ Overall exposure level for $unit: \([0-9.]*\) .*/\1/p")
  [[ -n $score ]] || fail "systemd-analyze security printed no score for $unit"
  bound=$(sed -n "s/^| \`$unit\` | [^|]* | \([0-9.]*\) [A-Z]* |.*/\1/p" "$src/docs/OPERATIONS.md")
  [[ -n $bound ]] || fail "docs/OPERATIONS.md records no exposure for $unit (Hardening table)"
  awk -v s="$score" -v b="$bound" 'BEGIN { exit !(s <= b) }' ||
    fail "$unit exposure $score is above the recorded $bound"
  echo "$unit: exposure $score (recorded bound $bound)"
done

# `cmake --install` to another prefix installs the same files, its units naming that prefix's bin/.
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install"; }
deb_files=$(cd "$root/usr" && find . -type f | LC_ALL=C sort)
prefix_files=$(cd "$tmp/prefix" && find . -type f | LC_ALL=C sort)
if [[ $prefix_files != "$deb_files" ]]; then
  diff <(echo "$deb_files") <(echo "$prefix_files") >&2 || true
  fail "cmake --install --prefix installs other files than the .deb's /usr (- .deb, + prefix)"
fi
for unit in "${units[@]}"; do
  exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$tmp/prefix/lib/systemd/system/$unit")
  [[ $exec_start == "$tmp/prefix/bin/"* && -x $exec_start ]] ||
    fail "$unit installed to $tmp/prefix: ExecStart=$exec_start"
done

# The Python package and the pkg-config files, from the extracted tree.
py=$(PYTHONPATH=$root/usr/lib/python3/dist-packages timeout 30 python3 -c \
  'import dgt, dgt.keys; print(dgt.__file__, dgt.__version__)')
[[ $py == "$root/usr/lib/python3/dist-packages/dgt/__init__.py $version" ]] || fail "python: $py"
for pc in dgt-store dgt-worker; do
  cflags=$(PKG_CONFIG_PATH=$root/usr/lib/pkgconfig pkg-config --cflags-only-I "$pc")
  [[ ${cflags%% *} == "-I$root/usr/lib/pkgconfig/../../include" ]] || fail "$pc cflags: $cflags"
done
echo "PASS: dgt_${version} .deb: $(wc -l <<<"$actual") entries, ${binaries[*]} --version," \
  "${units[*]} verified and scored"

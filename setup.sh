#!/usr/bin/env bash
# Install everything the emulator needs, idempotently, then optionally run.
#
#   sudo ./setup.sh              install (and measure this machine's budget once)
#   sudo ./setup.sh run [ARGS]   install, then: python -m emulator run ARGS, then
#                                measure the budget once if it is not cached yet
#   sudo ./setup.sh test [ARGS]  install, then: the whole test suite (pytest ARGS)
#
# The same script provisions the Vagrant VM, a bare Debian/Ubuntu machine and CI.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${FABRIC_LAB_VENV:-$HERE/.venv}"
APT_PACKAGES=(openvswitch-switch openvswitch-common mininet iperf3 ethtool
              iputils-ping iproute2 tcpdump tshark nftables procps psmisc curl
              openssh-client openssh-server openssl libtcmalloc-minimal4
              clang libbpf-dev frr python3 python3-venv python3-pip)

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "must run as root: sudo $0 $*"

# Only the test suite needs these (it validates the Vagrantfile, and drives a headless
# browser through chromedriver to read the --ui page and report.html).
TEST_PACKAGES=(vagrant chromium chromium-driver)

install_packages() {
    local missing=() wanted=("${APT_PACKAGES[@]}")
    [ "${1:-}" = "test" ] && wanted+=("${TEST_PACKAGES[@]}")
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "Debian packages: all present"
        return
    fi
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # wireshark-common asks whether non-root users may capture; answer no.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    timeout 900 apt-get update -qq || die "apt-get update failed"
    timeout 1800 apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        || die "apt-get install failed for: ${missing[*]}"
}

make_venv() {
    local stamp="$VENV/.requirements.sha256"
    local want
    want="$(cat "$HERE/requirements.txt" "$HERE/constraints.txt" | sha256sum | cut -d' ' -f1)"
    mkdir -p "$(dirname "$VENV")"
    if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        say "virtual environment: up to date ($VENV)"
        return
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating virtual environment $VENV (system interpreter, system site packages)"
        /usr/bin/python3 -m venv --system-site-packages "$VENV" || die "venv creation failed"
    fi
    say "installing pinned Python packages"
    timeout 1200 "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        -r "$HERE/requirements.txt" -c "$HERE/constraints.txt" \
        || die "pip install failed"
    echo "$want" > "$stamp"
}

# ovs-vswitchd's userspace datapath sends every port's frames through one packet
# socket; frames waiting in a switch port's shaper count against its send buffer,
# which is net.core.wmem_default when the daemon opens it. 208 kB drops frames
# silently under any congestion, so raise it (persistently) before OVS starts.
# A queued 4 KiB frame holds ~8 kB of it: 64 MB carries ~32 MB of queued frames
# (16 MB lost frames in an AlltoAll with deep queues).
WMEM=67108864
tune_kernel() {
    if [ -d /etc/sysctl.d ]; then
        echo "net.core.wmem_default = $WMEM" > /etc/sysctl.d/60-fabric-lab.conf
    fi
    if [ "$(sysctl -n net.core.wmem_default)" -lt "$WMEM" ]; then
        sysctl -qw net.core.wmem_default="$WMEM" || die "cannot set net.core.wmem_default"
        say "net.core.wmem_default set to $WMEM"
    fi
}

ovs_running() { timeout 10 ovs-vsctl --timeout=5 show >/dev/null 2>&1; }

# The userspace datapath allocates 32 MTU-sized buffers for every receive on every
# port and frees the unused ones: glibc's malloc made that a third of the machine's
# CPU, tcmalloc's per-thread caches make it cheap (ovs-vswitchd at 34-40 % of a
# core instead of 63-65 % in the default run). Open vSwitch starts with it preloaded.
# awk reads to the end: leaving early would kill ldconfig with SIGPIPE, which
# pipefail turns into this function's (and setup's) exit status 141
tcmalloc_path() { ldconfig -p | awk '$1 == "libtcmalloc_minimal.so.4" && !p { print $NF; p = 1 }'; }

ovs_allocator() {   # tcmalloc | malloc: what the running ovs-vswitchd allocates with
    local pid
    pid="$(cat /run/openvswitch/ovs-vswitchd.pid 2>/dev/null || true)"
    if [ -n "$pid" ] && grep -q libtcmalloc "/proc/$pid/maps" 2>/dev/null; then
        echo tcmalloc
    else
        echo malloc
    fi
}

preload_tcmalloc() {   # persistently, where systemd starts Open vSwitch
    local lib dir=/etc/systemd/system/ovs-vswitchd.service.d conf
    lib="$(tcmalloc_path)"
    [ -n "$lib" ] || die "libtcmalloc_minimal.so.4 is missing: apt-get install libtcmalloc-minimal4"
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        conf="$(printf '[Service]\nEnvironment=LD_PRELOAD=%s\n' "$lib")"
        if [ "$(cat "$dir/60-fabric-lab.conf" 2>/dev/null)" != "$conf" ]; then
            mkdir -p "$dir"
            echo "$conf" > "$dir/60-fabric-lab.conf"
            timeout 60 systemctl daemon-reload || die "systemctl daemon-reload failed"
        fi
    fi
}

ovs_send_buffer() {   # the send buffer of ovs-vswitchd's packet socket, if it has one
    ss -0 -m -p 2>/dev/null | awk '/ovs-vswitchd/ { if (match($0, /tb[0-9]+/))
        { print substr($0, RSTART + 2, RLENGTH - 2); exit } }'
}

ovs_ctl() {   # start | restart
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        timeout 120 systemctl "$1" openvswitch-switch || die "systemctl $1 openvswitch-switch failed"
    else
        # No systemd (containers, CI): ovs-ctl prints harmless ulimit/module complaints.
        timeout 120 env LD_PRELOAD="$(tcmalloc_path)" \
            /usr/share/openvswitch/scripts/ovs-ctl "$1" --system-id=random >/dev/null 2>&1 || true
    fi
}

start_ovs() {
    preload_tcmalloc
    if ovs_running; then
        local tb why=""
        tb="$(ovs_send_buffer)"
        if [ -n "$tb" ] && [ "$tb" -lt "$WMEM" ]; then
            why="its send buffer is $tb bytes"
        fi
        if [ "$(ovs_allocator)" != tcmalloc ]; then
            why="${why:+$why, }it allocates with glibc's malloc"
        fi
        if [ -n "$why" ]; then
            if [ -z "$(ovs-vsctl --timeout=5 list-br)" ]; then
                say "restarting Open vSwitch ($why; no bridges exist)"
                ovs_ctl restart
            else
                say "warning: Open vSwitch needs a restart ($why) and other bridges exist;"
                say "  restart it yourself (e.g. systemctl restart openvswitch-switch):"
                say "  shaped runs on the userspace datapath refuse a small send buffer"
            fi
        else
            say "Open vSwitch: running"
            return
        fi
    else
        say "starting Open vSwitch daemons"
        ovs_ctl start
    fi
    ovs_running || die "Open vSwitch did not start; see /var/log/openvswitch/ovs-vswitchd.log"
    say "Open vSwitch: running"
}

# --control bgp runs FRR's daemons per router, started by the run itself (each under the
# run's state directory): the package's own service must not run (its zebra would own
# the machine's routing table and /var/run/frr). Stopped and disabled where systemd runs
# it; elsewhere (containers, CI) the package's init script never started it.
quiet_frr() {
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        if systemctl is-enabled --quiet frr 2>/dev/null; then
            timeout 60 systemctl disable frr >/dev/null 2>&1 || die "systemctl disable frr failed"
        fi
        if systemctl is-active --quiet frr 2>/dev/null; then
            timeout 60 systemctl stop frr || die "systemctl stop frr failed"
        fi
    else
        # no systemd: the package's init script may have started it (no policy-rc.d
        # forbade it); its daemons keep their pid files in /run/frr, a run's never do
        if ls /run/frr/*.pid >/dev/null 2>&1 && [ -x /usr/lib/frr/frrinit.sh ]; then
            timeout 60 /usr/lib/frr/frrinit.sh stop >/dev/null 2>&1 || die "stopping frr failed"
        fi
        if [ -x /etc/init.d/frr ] && command -v update-rc.d >/dev/null; then
            timeout 60 update-rc.d frr disable >/dev/null 2>&1 || true
        fi
    fi
    say "FRR: installed; its own service stopped and disabled (runs start their own)"
}

# The eBPF programs (ECN marking at dequeue, PFC accounting) are C, compiled here with
# clang into the package's build folder; a run compiles what is missing or stale itself.
build_bpf() {
    (cd "$HERE" && timeout 300 "$VENV/bin/python" -m emulator.dataplane.bpf build) \
        || die "compiling the eBPF programs failed (clang -target bpf; see above)"
}

# Runs and drills size their load by this machine's measured budget: measure it once
# (3-4 minutes), unless it is cached. The test suite measures its own.
calibrate_once() {
    say "this machine's budget: measuring it unless cached (python -m emulator calibrate)"
    (cd "$HERE" && "$VENV/bin/python" -m emulator calibrate --if-missing) \
        || say "warning: calibration failed: runs will say the budget is unknown"
}

install_packages "${1:-}"
make_venv
build_bpf
tune_kernel
start_ovs
quiet_frr
# a first result comes first: `run` measures the budget after it (the run says when
# it has none)
[ -z "${1:-}" ] && calibrate_once

cmd="${1:-}"
[ $# -gt 0 ] && shift
cd "$HERE"
case "$cmd" in
    "") say "done; run: ${SUDO_USER:+sudo }$VENV/bin/python -m emulator run (as root)" ;;
    run)
        rc=0
        "$VENV/bin/python" -m emulator run "$@" || rc=$?
        # after a first result, the budget once (3-4 minutes; Ctrl-C skips it)
        [ "$rc" -eq 0 ] && calibrate_once
        exit "$rc" ;;
    test)
        if [ $# -gt 0 ]; then
            exec "$VENV/bin/python" -m pytest "$@"
        fi
        # every test, then the integration tests once more with every fabric on two
        # datapath instances of its own (docs/datapath-instances.md)
        "$VENV/bin/python" -m pytest
        say "the integration tests again, with FABRIC_LAB_LAYOUT=2"
        FABRIC_LAB_LAYOUT=2 exec "$VENV/bin/python" -m pytest tests/integration ;;
    *) die "unknown command '$cmd' (use: run, test, or nothing)" ;;
esac

#!/usr/bin/env bash
# Install everything the emulator needs, idempotently, then optionally run.
#
#   sudo ./setup.sh              install only
#   sudo ./setup.sh run [ARGS]   install, then: python -m emulator run ARGS
#   sudo ./setup.sh test [ARGS]  install, then: the whole test suite (pytest ARGS)
#
# The same script provisions the Vagrant VM, a bare Debian/Ubuntu machine and CI.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${FABRIC_LAB_VENV:-$HERE/.venv}"
APT_PACKAGES=(openvswitch-switch openvswitch-common mininet iperf3 ethtool
              iputils-ping iproute2 tcpdump tshark nftables procps psmisc
              python3 python3-venv python3-pip)

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "must run as root: sudo $0 $*"

install_packages() {
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
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

start_ovs() {
    if timeout 10 ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
        say "Open vSwitch: running"
        return
    fi
    say "starting Open vSwitch daemons"
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        timeout 120 systemctl start openvswitch-switch || die "systemctl start openvswitch-switch failed"
    else
        # No systemd (containers, CI): ovs-ctl prints harmless ulimit/module complaints.
        timeout 120 /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random \
            >/dev/null 2>&1 || true
    fi
    timeout 10 ovs-vsctl --timeout=5 show >/dev/null 2>&1 \
        || die "Open vSwitch did not start; see /var/log/openvswitch/ovs-vswitchd.log"
    say "Open vSwitch: started"
}

install_packages
make_venv
start_ovs

cmd="${1:-}"
[ $# -gt 0 ] && shift
cd "$HERE"
case "$cmd" in
    "") say "done; run: sudo $VENV/bin/python -m emulator run" ;;
    run) exec "$VENV/bin/python" -m emulator run "$@" ;;
    test) exec "$VENV/bin/python" -m pytest "$@" ;;
    *) die "unknown command '$cmd' (use: run, test, or nothing)" ;;
esac

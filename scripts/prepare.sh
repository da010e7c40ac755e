#!/usr/bin/env bash
# Idempotent host preparation: OS packages, npm dependencies, build.
# A second run only checks and exits quickly.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
declare -A probe=(
  [openvswitch-switch]=ovs-vswitchd [iptables]=iptables [nftables]=nft [iproute2]=ip
  [ethtool]=ethtool [conntrack]=conntrack [netcat-openbsd]=nc [iputils-ping]=ping
  [tcpdump]=tcpdump [openssl]=openssl
  # The chaos suite's hostile Pod sends forged ARP and Ethernet frames with raw sockets.
  [python3]=python3
  # The container image (npm run image) and the lab's DaemonSet kubelet: Debian root filesystem,
  # podman with runc (crun cannot run containers on this cgroup-v1 hybrid host).
  [mmdebstrap]=mmdebstrap [podman]=podman [runc]=runc
  # The CNI plugin's native front end (cni/native/sluice-cni.c), linked statically.
  [gcc]=gcc
)
for pkg in "${!probe[@]}"; do
  command -v "${probe[$pkg]}" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "${probe[$pkg]}" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
[ -x /usr/lib/cni/ptp ] && [ -x /usr/lib/cni/host-local ] || need_pkgs+=(containernetworking-plugins)
# The static C library the front end links against.
[ -f "/usr/lib/$(uname -m)-linux-gnu/libc.a" ] || need_pkgs+=(libc6-dev)
# The agent's allocator (daemon/node-flags.ts agentEnv), as in its image.
[ -f "/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2" ] || need_pkgs+=(libjemalloc2)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "prepare: missing OS packages (${need_pkgs[*]}) and not root: install them and retry" >&2
    exit 1
  fi
  echo "prepare: installing OS packages: ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
# Debian starts the machine-wide OVS on install; sluice's lab runs its own per-node OVS and never uses it.

lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -d node_modules ] || [ "$(cat node_modules/.sluice-lock 2>/dev/null)" != "$lock_sum" ]; then
  echo "prepare: npm ci" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  echo "$lock_sum" > node_modules/.sluice-lock
fi
# bun's own binary (used only to compile the CNI plugin) is installed by its postinstall script,
# which npm may skip; run it explicitly if the binary is missing.
if ! node_modules/.bin/bun --version >/dev/null 2>&1; then
  (cd node_modules/bun && node install.js) >&2
fi

echo "prepare: build" >&2
npm run -s build >&2

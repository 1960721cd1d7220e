#!/usr/bin/env bash
# Installs the system packages flowshift's build and tests need, if missing, on a
# Debian machine (as root, or with sudo). Safe to run again.
#   tshark            validates every pcap the test suite writes
#   cmake, g++        build the HiGHS MILP solver from source (the `highs` crate)
#   libclang-dev      bindgen, for HiGHS's C bindings
#   fonts-dejavu-core the font `flowshift compare` draws its plots' text with
#   iproute2, ethtool, iputils-ping the network-namespace test bed of the
#                     interface tests
#   nftables, procps  the kernel peer of `flowshift bench-kernel` (NAT + conntrack)
#   python3           seeds the fuzz corpora (scripts/fuzz_seeds.py), checks the
#                     code's shape (scripts/structure.py)
#   iperf3            the real TCP load of the interface order test
#   bird2             BGP and BFD of the pool's router and nodes (pool run --routing bgp)
#   util-linux        setpriv: an interface run without CAP_NET_RAW, as a user's
set -euo pipefail

need=()
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null || need+=(libclang-dev)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ethtool >/dev/null 2>&1 || need+=(ethtool)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v sysctl >/dev/null 2>&1 || [ -x /usr/sbin/sysctl ] || need+=(procps)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
command -v bird >/dev/null 2>&1 || [ -x /usr/sbin/bird ] || need+=(bird2)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "flowshift: installing ${need[*]} (apt)" >&2
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

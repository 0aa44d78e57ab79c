#!/bin/sh
# /init of the uroce rxe interop guests (static busybox + Debian's rdma-core/perftest/iproute2).
# The runner overlays this file, /roce/env and /roce/cmd.sh as a second cpio at every boot.
#
# /roce/env (shell variables):
#   ROCE_NAME   hostname                      ROCE_ADDRS  "10.77.0.11/24 fd00:77::11/64" (eth0)
#   ROCE_MTU    eth0 MTU (default 1500)       ROCE_RXE    1 = create rxe0 on eth0 (default), 0 = no rxe
#   ROCE_HOLD   1 = stay up after the command (shell on the console) until killed
# Console protocol (one line each, after "[roce-init <uptime>s] "; the harness parses these):
#   ROCE-BOOT kernel=<uname -r>    ROCE-GID idx=<n> gid=<gid> type=<type>    ROCE-READY
#   ROCE-CMD-START    ROCE-CMD-EXIT rc=<n>    ROCE-HOLD    ROCE-POWEROFF
export PATH=/usr/sbin:/usr/bin HOME=/root TERM=dumb NO_COLOR=1
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
echo /usr/bin/modprobe >/proc/sys/kernel/modprobe
ROCE_NAME=roce-guest ROCE_ADDRS=10.77.0.10/24 ROCE_MTU="" ROCE_RXE=1 ROCE_HOLD=0 ROCE_DEV=rxe0
[ -f /roce/env ] && . /roce/env
hostname "$ROCE_NAME"
log() { echo "[roce-init $(cut -d' ' -f1 /proc/uptime)s] $*"; }
log "ROCE-BOOT kernel=$(uname -r) name=$ROCE_NAME"
# Debian's static busybox prefers its applets to PATH (`ip` would be busybox's): define shell
# functions for every real binary that an applet shadows; sourced by /init, the command and
# the console shell (ENV)
busybox --list >/tmp/.applets
find /usr/bin /usr/sbin -type f ! -name busybox |
  awk 'NR==FNR{a[$0]=1; next} {n=$0; sub(/.*\//,"",n); if (n in a) printf "%s() { %s \"$@\"; }\n", n, $0}' /tmp/.applets - >/roce/prelude.sh
. /roce/prelude.sh
for m in $(cat /etc/roce-modules); do modprobe "$m" 2>/dev/null || log "modprobe $m failed"; done
ip link set lo up
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
# no IPv6 DAD / router solicitation: addresses (and so rxe's GIDs) are usable at once, and the
# only IPv6 traffic is what the test makes
for k in accept_dad:0 accept_ra:0 router_solicitations:0; do
  echo "${k#*:}" >"/proc/sys/net/ipv6/conf/eth0/${k%:*}" 2>/dev/null
done
[ -n "$ROCE_MTU" ] && ip link set eth0 mtu "$ROCE_MTU"
n_addrs=0
for a in $ROCE_ADDRS; do
  case $a in *:*) ip -6 addr add "$a" dev eth0 nodad ;; *) ip addr add "$a" dev eth0 ;; esac || log "ip addr add $a failed"
  n_addrs=$((n_addrs+1))
done
ip link set eth0 up
if [ "$ROCE_RXE" = 1 ]; then
  rdma link add "$ROCE_DEV" type rxe netdev eth0 || log "rdma link add failed"
  P=/sys/class/infiniband/$ROCE_DEV/ports/1
  i=0; while ! grep -q ACTIVE "$P/state" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  # GID 0 is the MAC-derived link-local GID; every address adds one more (filled in
  # asynchronously). The table has hundreds of slots: read it with one grep, not a loop.
  gids_now() {
    grep -H . "$P"/gids/* 2>/dev/null | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$' |
      sed 's|.*/gids/\([0-9]*\):|\1 |'
  }
  want=$((n_addrs+1))
  i=0; while [ "$(gids_now | wc -l)" -lt $want ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  gids_now | while read -r idx v; do
    log "ROCE-GID idx=$idx gid=$v type=$(cat "$P/gid_attrs/types/$idx" 2>/dev/null | tr ' ' '_')"
  done
  log "eth0 $(cat /sys/class/net/eth0/address) mtu $(cat /sys/class/net/eth0/mtu); $ROCE_DEV state $(cat "$P/state" 2>/dev/null)"
fi
log "ROCE-READY"
rc=0
if [ -f /roce/cmd.sh ]; then
  log "ROCE-CMD-START"
  (cd /root && sh -c '. /roce/prelude.sh; . /roce/cmd.sh'); rc=$?
  log "ROCE-CMD-EXIT rc=$rc"
fi
if [ "$ROCE_HOLD" = 1 ] || [ ! -f /roce/cmd.sh ]; then
  log "ROCE-HOLD (shell on the console; 'poweroff -f' or kill qemu to end)"
  stty -F /dev/ttyS0 cols 4096 2>/dev/null
  COLUMNS=4096 ENV=/roce/prelude.sh setsid cttyhack sh
fi
log "ROCE-POWEROFF"
sync; poweroff -f

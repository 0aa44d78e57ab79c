#!/usr/bin/env bash
# run-guest.sh - boot one rxe guest by hand (the Rust harness, rxe-compat/src/harness.rs, does the
# same for tests). Same guest contract: guest-init.sh as /init + /roce/env + /roce/cmd.sh overlay.
#
#   run-guest.sh lab-up   [NS]      # namespace NS (default uroce-ix-manual) + bridge br0
#                                   #   (10.77.0.1/24, fd00:77::1/64); idempotent
#   run-guest.sh lab-down [NS]      # kill what runs in NS, delete it (taps and bridge go with it)
#   run-guest.sh sweep              # remove uroce-ix-<pid>-* namespaces of dead processes
#   run-guest.sh stop NAME [NS]     # SIGTERM the qemu of guest NAME
#   run-guest.sh [opts] [--] [CMD...]   # boot, run CMD in the guest, stream the console;
#                                       # exit status = CMD's (ROCE-CMD-EXIT rc=N)
# opts: --flavour bookworm|trixie (bookworm)  --name N (g<last IPv4 octet>)  --addr A/P (repeatable;
#       default 10.77.0.11/24)  --hold (stay up; shell on the console)  --nic-opts O (e.g.
#       iommu_platform=on,disable-legacy=on)  --put SRC:DST (host file into the guest)  --mtu M
#       --mem MB (512)  --smp N (1)  --timeout S (600; qemu is killed after S seconds)  --ns NS
# Run host-side programs next to the guests with `ip netns exec NS prog`.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${UROCE_INTEROP_CACHE:-/var/cache/uroce-interop}
NS=uroce-ix-manual

lab_up() {
  [ -e "/run/netns/$NS" ] || ip netns add "$NS"
  ip netns exec "$NS" sh -c 'for k in accept_dad router_solicitations accept_ra; do
    for s in all default; do echo 0 > /proc/sys/net/ipv6/conf/$s/$k; done; done'
  ip -n "$NS" link set lo up
  ip -n "$NS" link show br0 >/dev/null 2>&1 || ip -n "$NS" link add br0 address 02:00:00:77:00:01 type bridge stp_state 0
  ip -n "$NS" addr replace 10.77.0.1/24 dev br0
  ip -n "$NS" -6 addr replace fd00:77::1/64 dev br0 nodad
  ip -n "$NS" link set br0 up
}
lab_down() {
  for p in $(ip netns pids "$NS" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
}
case ${1:-} in
  lab-up) NS=${2:-$NS}; lab_up; echo "lab $NS up"; exit 0 ;;
  lab-down) NS=${2:-$NS}; lab_down; exit 0 ;;
  sweep)
    for n in $(ls /run/netns 2>/dev/null | grep '^uroce-ix-[0-9]*-' || true); do
      pid=${n#uroce-ix-}; pid=${pid%%-*}
      [ -d "/proc/$pid" ] || { NS=$n; lab_down; echo "removed stale $n"; }
    done
    exit 0 ;;
  stop) f=/run/uroce-interop/${3:-$NS}/${2:?name}.pid; [ -f "$f" ] && kill -TERM "$(cat "$f")" && echo "stopped $2"; exit 0 ;;
esac

FLAVOUR=bookworm NAME="" ADDRS=() HOLD=0 NICOPTS="" PUTS=() MTU="" MEM=512 SMP=1 TIMEOUT=600
while [ $# -gt 0 ]; do
  case $1 in
    --flavour) FLAVOUR=$2; shift 2 ;; --name) NAME=$2; shift 2 ;; --addr) ADDRS+=("$2"); shift 2 ;;
    --hold) HOLD=1; shift ;; --nic-opts) NICOPTS=,$2; shift 2 ;; --put) PUTS+=("$2"); shift 2 ;;
    --mtu) MTU=$2; shift 2 ;; --mem) MEM=$2; shift 2 ;; --smp) SMP=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;; --ns) NS=$2; shift 2 ;;
    --) shift; break ;; -*) echo "unknown option $1" >&2; exit 2 ;; *) break ;;
  esac
done
[ ${#ADDRS[@]} -gt 0 ] || ADDRS=(10.77.0.11/24)
IMG=$CACHE/$FLAVOUR/current
[ -f "$IMG/BUILD-OK" ] || { echo "no $FLAVOUR image in $CACHE: run $HERE/build-guests.sh $FLAVOUR" >&2; exit 1; }
v4=""; for a in "${ADDRS[@]}"; do case $a in *.*.*.*) v4=${a%/*}; break ;; esac; done
o3=$(echo "${v4:-0.0.0.0}" | cut -d. -f3) o4=$(echo "${v4:-0.0.0.0}" | cut -d. -f4)
NAME=${NAME:-g$o4}; TAP=tap-$NAME; TAP=${TAP:0:15}
MAC=$(printf '52:54:00:77:%02x:%02x' "$o3" "$o4")
lab_up >/dev/null

ST=/run/uroce-interop/$NS; mkdir -p "$ST"; X=$(mktemp -d)
cleanup() { ip -n "$NS" link del "$TAP" 2>/dev/null || true; rm -rf "$X" "$ST/$NAME.pid" "$ST/$NAME.initrd"; }
trap cleanup EXIT
mkdir -p "$X/roce"; install -m 755 "$HERE/guest-init.sh" "$X/init"
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{ echo "ROCE_NAME=$(q "$NAME")"; echo "ROCE_ADDRS=$(q "${ADDRS[*]}")"; echo "ROCE_MTU=$(q "$MTU")"
  echo "ROCE_RXE=1"; echo "ROCE_HOLD=$HOLD"; } >"$X/roce/env"
[ $# -gt 0 ] && printf '%s\n' "$*" >"$X/roce/cmd.sh"
for p in "${PUTS[@]}"; do mkdir -p "$X/$(dirname "${p#*:}")"; cp "${p%%:*}" "$X/${p#*:}"; done
{ cat "$IMG/initramfs.cpio.gz"; (cd "$X" && find . | cpio -o -H newc --quiet -R 0:0 | gzip -1); } >"$ST/$NAME.initrd"

ip -n "$NS" link del "$TAP" 2>/dev/null || true
ip -n "$NS" tuntap add dev "$TAP" mode tap
ip -n "$NS" link set "$TAP" master br0 up
echo "[run-guest] $NAME ($FLAVOUR) ${ADDRS[*]} mac=$MAC tap=$TAP ns=$NS" >&2
if [ "$HOLD" = 1 ] && [ -t 0 ]; then SER=(-serial mon:stdio); else SER=(-serial stdio); exec </dev/null; fi
LOG=$ST/$NAME.log
set +e
timeout -s KILL "$TIMEOUT" ip netns exec "$NS" qemu-system-x86_64 -accel tcg -cpu max -m "$MEM" -smp "$SMP" \
  -display none -no-reboot -nodefaults "${SER[@]}" -pidfile "$ST/$NAME.pid" \
  -kernel "$IMG/vmlinuz" -initrd "$ST/$NAME.initrd" -append "console=ttyS0 panic=-1 quiet loglevel=3" \
  -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$MAC$NICOPTS" |
  sed -u 's/\r$//' | tee "$LOG"
qrc=${PIPESTATUS[0]}
set -e
rc=$(sed -n 's/.*ROCE-CMD-EXIT rc=\([0-9]*\).*/\1/p' "$LOG" | tail -1)
exit "${rc:-$qrc}"

#!/usr/bin/env bash
# build-guests.sh - build the QEMU guests that give uroce real Linux rxe (soft-RoCE) peers.
#
#   build-guests.sh [--refresh] [--force] [--check] [bookworm|trixie|all|tools ...]   (default: all)
#
# Flavours (everything comes from Debian packages: `apt-get download` + `dpkg -x`, nothing else):
#   bookworm  Debian 12 kernel (linux-image-amd64 -> 6.1), rdma-core 44, perftest 4.5, iproute2, busybox-static
#   trixie    trixie-backports kernel 6.17 (rdma_rxe + zero-copy-capable virtio_net), rdma-core 56.1 and
#             perftest 25.01 from trixie main, and trixie's own glibc etc. (whole NEEDED closure)
# Each flavour is reached through a PRIVATE apt configuration under $CACHE/apt/<flavour> (own
# sources.list, lists, status and package cache): the system's apt sources are never touched.
#
# Cache (outside the source tree): $UROCE_INTEROP_CACHE, default /var/cache/uroce-interop
#   <flavour>/builds/<kernel>-<key>/{vmlinuz,initramfs.cpio.gz,manifest.txt,info,BUILD-OK}
#   <flavour>/current -> builds/<kernel>-<key>
# <key> hashes the exact .deb files (name, size, SHA256) plus this script's LAYOUT, so a new Debian
# package version yields a new build directory. A flavour whose `current` build is complete is a
# no-op without any network access (--refresh re-resolves versions with `apt-get update`;
# --force rebuilds; --check only reports and exits 1 when something is missing).
# `tools` builds $CACHE/tools/uroce-verbs-ops from verbs-ops.c (host gcc, headers and libibverbs
# from bookworm's libibverbs-dev/libibverbs1 debs): a tiny verbs program for the opcodes perftest
# cannot produce (SEND with immediate / with invalidate); the fixture recorder puts it into guests.
# The per-guest /init, IP config and command are NOT in the image: the runner appends them as a
# second cpio at boot (see guest-init.sh), so changing them never needs a rebuild.
# Env: UROCE_INTEROP_CACHE, UROCE_INTEROP_MIRROR, UROCE_INTEROP_SECURITY_MIRROR,
#      UROCE_TRIXIE_KERNEL (exact package, e.g. linux-image-6.17.13+deb13-amd64),
#      UROCE_TRIXIE_KERNEL_SERIES (default 6.17), KEEP=1 (keep the ~0.5-1 GB staging trees;
#      the .debs, ~80 + ~175 MB, are always kept in <flavour>/debs for offline rebuilds).
# Host needs (Debian): apt-get, dpkg-deb, depmod (kmod), cpio, gzip, xz, zstd, readelf (binutils), flock.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${UROCE_INTEROP_CACHE:-/var/cache/uroce-interop}
LAYOUT=6 # bump when the image layout changes (invalidates every cached build)
# The Debian archive and security archive: this machine's own, as its apt sources name them
# (apt-get indextargets reads both the one-line and the deb822 formats), unless the environment
# says otherwise. The repository names no mirror host of its own.
apt_site() { # "main" | "security" -> the first configured site serving such a suite
  apt-get indextargets --format '$(SITE) $(RELEASE)' 2>/dev/null | awk -v want="$1" '
    { sec = ($2 ~ /-security$/) }
    (want == "security" && sec) || (want == "main" && !sec && $2 !~ /-(updates|backports)$/) { print $1; exit }'
}
MIRROR=${UROCE_INTEROP_MIRROR:-$(apt_site main)}
SECMIRROR=${UROCE_INTEROP_SECURITY_MIRROR:-$(apt_site security)}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
REFRESH=0 FORCE=0 CHECK=0 FLAVOURS=()
while [ $# -gt 0 ]; do
  case $1 in
    --refresh) REFRESH=1 ;; --force) FORCE=1 ;; --check) CHECK=1 ;;
    bookworm | trixie | tools) FLAVOURS+=("$1") ;; all) FLAVOURS+=(bookworm trixie) ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-guests: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ ${#FLAVOURS[@]} -gt 0 ] || FLAVOURS=(bookworm trixie)
log() { echo "[build-guests $(date +%T)] $*" >&2; }
die() { echo "build-guests: error: $*" >&2; exit 1; }

# --- fast path: is the current build of a flavour complete? (no network) -------------------------
complete() { # flavour -> 0 when $CACHE/<f>/current is a finished build of this LAYOUT
  local c=$CACHE/$1/current
  [ -f "$c/BUILD-OK" ] && [ -f "$c/vmlinuz" ] && [ -f "$c/initramfs.cpio.gz" ] &&
    grep -qx "layout=$LAYOUT" "$c/BUILD-OK"
}
if [ "$CHECK" = 1 ]; then
  rc=0
  for f in "${FLAVOURS[@]}"; do
    if complete "$f"; then echo "$f: complete ($(readlink "$CACHE/$f/current"))"; else echo "$f: missing or incomplete in $CACHE/$f"; rc=1; fi
  done
  exit $rc
fi

[ "$(id -u)" = 0 ] || die "run as root (apt-get download into $CACHE, depmod)"
need() { command -v "$1" >/dev/null || die "missing host tool: $1 (apt-get install $2)"; }
need apt-get apt; need dpkg-deb dpkg; need depmod kmod; need modprobe kmod; need cpio cpio
need gzip gzip; need xz xz-utils; need zstd zstd; need readelf binutils; need flock util-linux
need sha256sum coreutils
[ -r "$KEYRING" ] || die "missing $KEYRING (apt-get install debian-archive-keyring)"
[ -n "$MIRROR" ] && [ -n "$SECMIRROR" ] ||
  die "no Debian archive and security archive in this machine's apt sources; set UROCE_INTEROP_MIRROR and UROCE_INTEROP_SECURITY_MIRROR"

sources_for() {
  case $1 in
    bookworm) printf '%s\n' \
      "deb [signed-by=$KEYRING] $MIRROR bookworm main" \
      "deb [signed-by=$KEYRING] $MIRROR bookworm-updates main" \
      "deb [signed-by=$KEYRING] $SECMIRROR bookworm-security main" ;;
    trixie) printf '%s\n' \
      "deb [signed-by=$KEYRING] $MIRROR trixie main" \
      "deb [signed-by=$KEYRING] $MIRROR trixie-updates main" \
      "deb [signed-by=$KEYRING] $SECMIRROR trixie-security main" \
      "deb [signed-by=$KEYRING] $MIRROR trixie-backports main" ;;
  esac
}

# Userspace packages wanted in every guest (their lib* dependency closure is added below).
TOP="libibverbs1 ibverbs-providers librdmacm1 rdmacm-utils ibverbs-utils perftest iproute2 libibumad3
     libpci3 ethtool busybox-static libc-bin libgcc-s1"
# Libraries programs load with dlopen, which no DT_NEEDED names: glibc's pthread_exit and
# pthread_cancel unwind through libgcc_s.so.1 (rping, ucmatose and cmtime end their threads so).
DLOPENED="libgcc_s.so.1"
# Kernel modules: required, and optional ones (6.1's rxe wants the crypto API's crc32; 6.15+ uses lib/crc32).
MODS_REQ="rdma_rxe ib_uverbs rdma_ucm ib_umad virtio_net virtio_pci"
MODS_OPT="crc32_generic crc32-pclmul"

# Private apt configuration of a flavour: sets the global array O (options for apt-get/apt-cache).
apt_setup() {
  local F=$1 A=$CACHE/apt/$1
  mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/sources.list.d" "$A/preferences.d"
  sources_for "$F" >"$A/sources.list"
  : >"$A/preferences"
  [ -f "$A/status" ] || : >"$A/status"
  O=(-o "Dir::Etc::sourcelist=$A/sources.list" -o "Dir::Etc::sourceparts=$A/sources.list.d"
    -o "Dir::State::Lists=$A/lists" -o "Dir::State::status=$A/status"
    -o "Dir::State::extended_states=$A/extended_states" -o "Dir::Cache=$A/cache"
    -o "Dir::Etc::preferences=$A/preferences" -o "Dir::Etc::preferencesparts=$A/preferences.d"
    -o "APT::Get::List-Cleanup=0" -o "APT::Architectures=amd64" -o "APT::Sandbox::User=root"
    -o "Acquire::Languages=none")
}

build_flavour() {
  local F=$1 t0=$SECONDS
  local FD=$CACHE/$F A=$CACHE/apt/$F
  local W=$FD/work
  mkdir -p "$FD/builds"
  apt_setup "$F"
  log "$F: apt-get update (private config $A)"
  apt-get -q "${O[@]}" update >"$A/update.log" 2>&1 || { cat "$A/update.log" >&2; die "$F: apt-get update failed"; }

  # 1. kernel package
  local KPKG
  case $F in
    bookworm)
      KPKG=$(apt-cache "${O[@]}" depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}') ;;
    trixie)
      KPKG=${UROCE_TRIXIE_KERNEL:-}
      if [ -z "$KPKG" ]; then
        local S=${UROCE_TRIXIE_KERNEL_SERIES:-6.17}
        KPKG=$(apt-cache "${O[@]}" pkgnames "linux-image-$S." | grep -E "^linux-image-${S//./\\.}\.[0-9]+\+deb13-amd64$" | sort -V | tail -1 || true)
        if [ -z "$KPKG" ]; then
          # the backports archive keeps only its newest kernel: fall back to whatever it has now
          local bv
          bv=$(apt-cache "${O[@]}" madison linux-image-amd64 | awk -F'|' '/backports/{gsub(/ /,"",$2); print $2; exit}')
          [ -n "$bv" ] || die "trixie: no $S kernel and no linux-image-amd64 in trixie-backports"
          KPKG=$(apt-cache "${O[@]}" depends "linux-image-amd64=$bv" | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
          log "WARNING: trixie-backports has no linux-image-$S.*; using $KPKG (set UROCE_TRIXIE_KERNEL to pin)"
        fi
      fi ;;
  esac
  [ -n "$KPKG" ] || die "$F: cannot resolve the kernel package"
  local KVER=${KPKG#linux-image-}

  # 2. userspace closure: Depends/PreDepends, recursively, restricted to libraries (the ELF check
  #    below proves nothing is missing)
  # (trixie renamed some libraries for the 64-bit time_t transition: librdmacm1 -> librdmacm1t64)
  local top="" p
  for p in $TOP; do
    if [[ $(apt-cache "${O[@]}" policy "$p") == *"Candidate: "[0-9]* ]]; then top="$top $p"
    elif [[ $(apt-cache "${O[@]}" policy "${p}t64") == *"Candidate: "[0-9]* ]]; then top="$top ${p}t64"
    else die "$F: no package $p (nor ${p}t64)"; fi
  done
  local pkgs=" $top " queue="$top" next d
  while [ -n "$queue" ]; do
    next=""
    for d in $(apt-cache "${O[@]}" depends --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances $queue 2>/dev/null | awk '/^ *\|?(Pre)?Depends: [^<]/{print $2}' | sort -u); do
      case $d in lib* | zlib1g | gcc-*-base) ;; *) continue ;; esac
      case $pkgs in *" $d "*) ;; *) pkgs="$pkgs$d " next="$next $d" ;; esac
    done
    queue=$next
  done
  pkgs="$KPKG $(echo $pkgs | tr ' ' '\n' | sort -u | tr '\n' ' ')"

  # 3. the exact .deb files = the cache key
  local uris
  uris=$(cd /tmp && apt-get -q "${O[@]}" download --print-uris $pkgs) || die "$F: apt-get download --print-uris failed"
  local manifest key name
  manifest=$(echo "$uris" | awk '{print $2, $3, $4}' | sort)
  [ -n "$manifest" ] || die "$F: empty package manifest"
  key=$(printf 'layout=%s\nflavour=%s\nmods=%s %s\n%s\n' "$LAYOUT" "$F" "$MODS_REQ" "$MODS_OPT" "$manifest" | sha256sum | cut -c1-12)
  name=$KVER-$key
  if [ -f "$FD/builds/$name/BUILD-OK" ] && [ "$FORCE" != 1 ]; then
    ln -sfn "builds/$name" "$FD/current.tmp" && mv -T "$FD/current.tmp" "$FD/current"
    log "$F: packages unchanged, build $name is complete"
    return 0
  fi
  log "$F: building $name ($(echo "$manifest" | wc -l) packages, kernel $KPKG)"

  # 4. download (kept in <flavour>/debs, so a layout change rebuilds offline) + unpack
  rm -rf "$W"; mkdir -p "$W/stage" "$FD/debs"
  local DEBS=$FD/debs STAGE=$W/stage ROOT=$W/root fn want=""
  for fn in $(echo "$manifest" | awk '{print $1}'); do
    [ -f "$DEBS/$fn" ] || want="$want ${fn%%_*}"
  done
  if [ -n "$want" ]; then
    (cd "$DEBS" && apt-get -q "${O[@]}" download $want >"$FD/download.log" 2>&1) || { cat "$FD/download.log" >&2; die "$F: download failed"; }
  fi
  for fn in "$DEBS"/*.deb; do # drop debs of older versions
    [[ $'\n'$manifest == *$'\n'"${fn##*/} "* ]] || rm -f "$fn"
  done
  for fn in $(echo "$manifest" | awk '{print $1}'); do
    [ -f "$DEBS/$fn" ] || die "$F: $fn missing after download"
  done
  log "$F: debs ready ($(du -sh "$DEBS" | cut -f1), fetched:${want:- none}) after $((SECONDS - t0)) s; unpacking"
  for fn in "$DEBS"/*.deb; do dpkg-deb -x "$fn" "$STAGE"; done
  local KMD
  for KMD in "$STAGE/usr/lib/modules/$KVER" "$STAGE/lib/modules/$KVER" ""; do [ -z "$KMD" ] || [ -d "$KMD" ] && break; done
  [ -n "$KMD" ] || die "$F: no modules directory for $KVER in $KPKG"
  # host kmod looks in <base>/lib/modules: give a merged-/usr kernel tree that path
  if [ ! -e "$STAGE/lib/modules/$KVER" ]; then mkdir -p "$STAGE/lib/modules"; ln -s "$KMD" "$STAGE/lib/modules/$KVER"; fi
  [ -f "$STAGE/boot/vmlinuz-$KVER" ] || die "$F: no /boot/vmlinuz-$KVER in $KPKG"

  # 5. guest tree: merged /usr (bin, sbin, lib, lib64 are symlinks into usr/)
  mkdir -p "$ROOT"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,root,roce}
  ln -s usr/bin "$ROOT/bin"; ln -s usr/sbin "$ROOT/sbin"; ln -s usr/lib "$ROOT/lib"; ln -s usr/lib64 "$ROOT/lib64"
  local s b found
  findbin() { for s in usr/sbin usr/bin sbin bin; do [ -f "$STAGE/$s/$1" ] && { echo "$STAGE/$s/$1"; return 0; }; done; return 1; }
  # userspace tools (rdma-core utils, perftest, iproute2, ethtool)
  # (cp -L: several are symlinks, e.g. bookworm's /sbin/ip -> /bin/ip)
  for b in "$STAGE"/usr/bin/ib_* "$STAGE"/usr/bin/ibv_*; do [ -f "$b" ] && cp -L "$b" "$ROOT/usr/bin/"; done
  for b in rping ucmatose udaddy mckey rdma_client rdma_server rdma_xclient rdma_xserver rcopy rstream riostream cmtime; do
    found=$(findbin "$b") && cp -L "$found" "$ROOT/usr/bin/"
  done
  for b in ip rdma tc bridge ss ethtool; do
    found=$(findbin "$b") || die "$F: $b not found in the staged packages"
    cp -L "$found" "$ROOT/usr/sbin/$b"
  done
  # static busybox from the flavour's busybox-static: applets for whatever the packages lack
  found=$(findbin busybox) || die "$F: busybox not in busybox-static"
  [[ $(readelf -l "$found") != *"program interpreter"* ]] || die "$F: $found is not static"
  cp "$found" "$ROOT/usr/bin/busybox"
  for b in $("$ROOT/usr/bin/busybox" --list); do
    [ -e "$ROOT/usr/bin/$b" ] || [ -e "$ROOT/usr/sbin/$b" ] || ln -s busybox "$ROOT/usr/bin/$b"
  done
  # libibverbs: only the rxe provider (+ its .driver file); the hardware providers would only
  # print "couldn't load driver" warnings in a guest without such hardware
  mkdir -p "$ROOT/usr/lib/x86_64-linux-gnu/libibverbs" "$ROOT/etc/libibverbs.d"
  for d in usr/lib/x86_64-linux-gnu/libibverbs lib/x86_64-linux-gnu/libibverbs; do
    for b in "$STAGE/$d"/librxe-*.so; do [ -f "$b" ] && cp -L "$b" "$ROOT/usr/lib/x86_64-linux-gnu/libibverbs/"; done
  done
  ls "$ROOT"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so >/dev/null 2>&1 || die "$F: rxe provider missing"
  cp "$STAGE/etc/libibverbs.d/rxe.driver" "$ROOT/etc/libibverbs.d/" || die "$F: rxe.driver missing"
  [ -d "$STAGE/etc/iproute2" ] && cp -a "$STAGE/etc/iproute2" "$ROOT/etc/"
  [ -d "$STAGE/usr/share/iproute2" ] && { mkdir -p "$ROOT/usr/share"; cp -a "$STAGE/usr/share/iproute2" "$ROOT/usr/share/"; }

  # 6. shared libraries: walk DT_NEEDED from every ELF in the tree, copy from the staged packages
  #    only (never from the host), and fail on anything that does not resolve
  local libdirs="usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib64 lib64"
  local LIBD=$ROOT/usr/lib/x86_64-linux-gnu
  findlib() { for s in $libdirs; do [ -e "$STAGE/$s/$1" ] && { echo "$STAGE/$s/$1"; return 0; }; done; return 1; }
  local work="" n interp missing=0 e
  work=$(find "$ROOT/usr/bin" "$ROOT/usr/sbin" "$LIBD/libibverbs" -type f)
  for n in $DLOPENED; do
    found=$(findlib "$n") || die "$F: $n (loaded with dlopen) is in no staged package"
    cp -L "$found" "$LIBD/$n"
    work="$work $LIBD/$n"
  done
  while [ -n "$work" ]; do
    local newwork=""
    for e in $work; do
      interp=$(readelf -l "$e" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
      if [ -n "$interp" ] && [ ! -e "$ROOT$interp" ]; then
        found=$(findlib "$(basename "$interp")") || { echo "unresolved interpreter $interp for $e" >&2; missing=1; continue; }
        mkdir -p "$ROOT$(dirname "$interp")"; cp -L "$found" "$ROOT$interp"
      fi
      for n in $(readelf -d "$e" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
        [ -e "$LIBD/$n" ] && continue
        found=$(findlib "$n") || { echo "unresolved: ${e#"$ROOT"} -> $n" >&2; missing=1; continue; }
        cp -L "$found" "$LIBD/$n"
        newwork="$newwork $LIBD/$n"
      done
    done
    work=$newwork
  done
  [ $missing = 0 ] || die "$F: shared library resolution failed"
  printf '/usr/lib/x86_64-linux-gnu\n' >"$ROOT/etc/ld.so.conf"
  # ldconfig from the flavour's own libc-bin (static), the host's as a fallback (same cache format)
  found=$(findbin ldconfig) && [[ $(readelf -l "$found") != *"program interpreter"* ]] || found=ldconfig
  "$found" -r "$ROOT" || die "$F: ldconfig failed"

  # 7. kernel modules (decompressed: busybox modprobe loads plain .ko; the signature stays appended)
  local MD=$ROOT/usr/lib/modules/$KVER MODS="" m kos ko rel dst
  mkdir -p "$MD"
  depmod -b "$STAGE" "$KVER"
  for m in $MODS_REQ $MODS_OPT; do
    if ! kos=$(modprobe -d "$STAGE" -S "$KVER" --show-depends "$m" 2>/dev/null); then
      case " $MODS_REQ " in *" $m "*) die "$F: module $m not found in $KPKG" ;; esac
      log "$F: optional module $m not in $KVER (fine)"; continue
    fi
    MODS="$MODS $m"
    for ko in $(echo "$kos" | awk '$1=="insmod"{print $2}'); do
      rel=${ko#*/modules/"$KVER"/}; dst=$MD/${rel%.xz}; dst=${dst%.zst}; dst=${dst%.gz}
      [ -f "$dst" ] && continue
      mkdir -p "$(dirname "$dst")"
      case $ko in *.xz) xz -dc "$ko" >"$dst" ;; *.zst) zstd -qdc "$ko" >"$dst" ;; *.gz) gzip -dc "$ko" >"$dst" ;; *) cp "$ko" "$dst" ;; esac
    done
  done
  cp "$KMD"/modules.order "$KMD"/modules.builtin* "$MD/" 2>/dev/null || true
  depmod -b "$ROOT" "$KVER"
  MODS=${MODS# }
  echo "$MODS" >"$ROOT/etc/roce-modules"

  # 8. /etc + fallback /init (the runner overlays the current guest-init.sh at every boot)
  install -m 755 "$HERE/guest-init.sh" "$ROOT/init"
  echo "root:x:0:0:root:/root:/bin/sh" >"$ROOT/etc/passwd"
  echo "root:x:0:" >"$ROOT/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$ROOT/etc/hosts"
  ver() { echo "$manifest" | awk -v p="$1" '{split($1,a,"_"); if (a[1]==p) {gsub("%3a",":",a[2]); print a[2]; exit}}'; }
  {
    echo "flavour=$F"
    echo "kernel_package=$KPKG"
    echo "kernel_version=$KVER"
    echo "kernel_deb_version=$(ver "$KPKG")"
    echo "rdma_core=$(ver libibverbs1)$(ver libibverbs1t64)"
    echo "perftest=$(ver perftest)"
    echo "iproute2=$(ver iproute2)"
    echo "busybox=$(ver busybox-static)"
    echo "libc=$(ver libc6)"
    echo "modules=$MODS"
  } >"$ROOT/etc/uroce-guest-info"

  # 9. publish atomically: builds/<name>.tmp -> builds/<name>, then current -> it
  local B=$FD/builds/$name
  rm -rf "$B.tmp"; mkdir -p "$B.tmp"
  cp "$STAGE/boot/vmlinuz-$KVER" "$B.tmp/vmlinuz"
  (cd "$ROOT" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -6) >"$B.tmp/initramfs.cpio.gz"
  echo "$manifest" >"$B.tmp/manifest.txt"
  {
    cat "$ROOT/etc/uroce-guest-info"
    echo "key=$key"
    echo "initramfs_bytes=$(stat -c %s "$B.tmp/initramfs.cpio.gz")"
    echo "vmlinuz_bytes=$(stat -c %s "$B.tmp/vmlinuz")"
    echo "build_seconds=$((SECONDS - t0))"
    echo "built_at=$(date -u +%FT%TZ)"
  } >"$B.tmp/info"
  printf 'layout=%s\nkey=%s\n' "$LAYOUT" "$key" >"$B.tmp/BUILD-OK"
  rm -rf "$B"; mv "$B.tmp" "$B"
  ln -sfn "builds/$name" "$FD/current.tmp" && mv -T "$FD/current.tmp" "$FD/current"
  # keep only the current build; drop the staging trees unless KEEP=1
  for b in "$FD"/builds/*; do [ "$b" = "$B" ] || rm -rf "$b"; done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$W"   # (the .debs stay in $FD/debs)
  log "$F: built $name in $((SECONDS - t0)) s: vmlinuz $(du -h "$B/vmlinuz" | cut -f1), initramfs $(du -h "$B/initramfs.cpio.gz" | cut -f1)"
  sed 's/^/  /' "$B/info" >&2
}

build_tools() {
  local T=$CACHE/tools src=$HERE/verbs-ops.c key
  key=$(cat "$src" "$0" | sha256sum | cut -c1-12)
  if [ -x "$T/uroce-verbs-ops" ] && [ "$(cat "$T/key" 2>/dev/null)" = "$key" ] && [ "$REFRESH$FORCE" = 00 ]; then
    echo "tools: cached ($T/uroce-verbs-ops)"; return 0
  fi
  need gcc gcc; need objdump binutils
  apt_setup bookworm
  if [ "$REFRESH" = 1 ] || ! ls "$CACHE/apt/bookworm/lists/"*_Packages* >/dev/null 2>&1; then
    apt-get -q "${O[@]}" update >"$T.update.log" 2>&1 || { cat "$T.update.log" >&2; die "tools: apt-get update failed"; }
  fi
  rm -rf "$T/work"; mkdir -p "$T/work/debs" "$T/work/stage"
  (cd "$T/work/debs" && apt-get -q "${O[@]}" download libibverbs-dev libibverbs1 >"$T/work/download.log" 2>&1) ||
    { cat "$T/work/download.log" >&2; die "tools: download failed"; }
  for d in "$T"/work/debs/*.deb; do dpkg-deb -x "$d" "$T/work/stage"; done
  gcc -O2 -Wall -Wextra -o "$T/uroce-verbs-ops.tmp" "$src" -I "$T/work/stage/usr/include" \
    -L "$T/work/stage/usr/lib/x86_64-linux-gnu" -libverbs || die "tools: compile failed"
  # must run in both guests: only libibverbs + libc, glibc symbols <= bookworm's 2.36
  local needed glibc
  needed=$(readelf -d "$T/uroce-verbs-ops.tmp" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
  [ "$needed" = "libc.so.6 libibverbs.so.1 " ] || die "tools: unexpected NEEDED: $needed"
  glibc=$(objdump -T "$T/uroce-verbs-ops.tmp" | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)
  log "tools: uroce-verbs-ops needs $needed($glibc)"
  mv "$T/uroce-verbs-ops.tmp" "$T/uroce-verbs-ops"
  echo "$key" >"$T/key"
  ls "$T"/work/debs >"$T/debs.txt"
  rm -rf "$T/work"
  log "tools: built $T/uroce-verbs-ops (from $(tr '\n' ' ' <"$T/debs.txt"))"
}

mkdir -p "$CACHE"
for f in "${FLAVOURS[@]}"; do
  if [ "$f" = tools ]; then mkdir -p "$CACHE/tools"; build_tools; continue; fi
  if complete "$f" && [ "$REFRESH" != 1 ] && [ "$FORCE" != 1 ]; then
    echo "$f: cached ($(readlink "$CACHE/$f/current")); --refresh re-resolves package versions"
    continue
  fi
  # one builder per flavour at a time (tests may trigger builds concurrently)
  exec 9>"$CACHE/$f.lock"
  flock 9
  if complete "$f" && [ "$REFRESH" != 1 ] && [ "$FORCE" != 1 ]; then
    echo "$f: cached (built by a concurrent run)"
  else
    build_flavour "$f"
  fi
  exec 9>&-
done

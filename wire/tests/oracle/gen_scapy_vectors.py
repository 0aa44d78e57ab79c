#!/usr/bin/env python3
"""Independent oracle for the uroce-wire crate: RoCEv2 frames built by scapy.

Builds, from a fixed seed, >= 1000 RoCEv2 Ethernet frames with scapy (scapy.contrib.roce
provides BTH, AETH, CNPPadding and the ICRC; scapy computes the IPv4 header checksum, the
lengths and, for about half the frames, the UDP checksum) and writes one JSON object per line
to scapy_vectors.jsonl next to this script: every field value needed to rebuild the frame with
the wire crate, plus the frame bytes as scapy built them. wire/tests/scapy_oracle.rs replays
the file (no Python needed there).

scapy has no classes for RETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH and FETH: those are
packed here with struct from the field values (big-endian; layouts from IBTA Vol. 1 §9.3,
FETH from IBA 1.5 / Linux rxe `rxe_hdr.h`) and carried as Raw after the BTH / AETH, in the
order IBTA §9.3 gives (DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; rxe puts
FETH before RETH). The opcode table below is typed in from IBTA Table 38 and rxe_opcode.c,
independently of wire/src/opcode.rs.

As a third opinion the script recomputes every ICRC with its own few lines of Python (zlib
crc32 over the masked pseudo-packet) and refuses to write data where scapy disagrees.

Usage (from the repository root):
  python3 wire/tests/oracle/gen_scapy_vectors.py --write   # rewrite the data file
  python3 wire/tests/oracle/gen_scapy_vectors.py --check   # regenerate to a temp file and
                                                           # exit 1 if it differs (drift)
  python3 wire/tests/oracle/gen_scapy_vectors.py --crosscheck-rxe DIR  # scapy's ICRC vs real
                                                           # rxe pcaps (evidence, not CI)
Requires scapy (`pip install scapy`); the data was generated with the version recorded in the
header line.
"""

import argparse
import ipaddress
import json
import logging
import os
import platform
import random
import struct
import sys
import tempfile
import zlib

SEED = 0x0C0FFEE5
ROUNDS = 13  # every (opcode, IP version) pair ROUNDS times
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "scapy_vectors.jsonl")
ROCE_PORT = 4791

# --- the opcode table (IBTA Vol. 1 Table 38, §9.3; IBA 1.5 FLUSH / ATOMIC WRITE; CNP 0x81) ---
# (code, name, extension headers in wire order, payload: None = none, "any", or an exact length)
_RC_UC_COMMON = [
    (0x00, "SEND_FIRST", [], "any"),
    (0x01, "SEND_MIDDLE", [], "any"),
    (0x02, "SEND_LAST", [], "any"),
    (0x03, "SEND_LAST_WITH_IMMEDIATE", ["immdt"], "any"),
    (0x04, "SEND_ONLY", [], "any"),
    (0x05, "SEND_ONLY_WITH_IMMEDIATE", ["immdt"], "any"),
    (0x06, "RDMA_WRITE_FIRST", ["reth"], "any"),
    (0x07, "RDMA_WRITE_MIDDLE", [], "any"),
    (0x08, "RDMA_WRITE_LAST", [], "any"),
    (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", ["immdt"], "any"),
    (0x0A, "RDMA_WRITE_ONLY", ["reth"], "any"),
    (0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", ["reth", "immdt"], "any"),
]
OPCODES = (
    [(c, "RC_" + n, h, p) for (c, n, h, p) in _RC_UC_COMMON]
    + [
        (0x0C, "RC_RDMA_READ_REQUEST", ["reth"], None),
        (0x0D, "RC_RDMA_READ_RESPONSE_FIRST", ["aeth"], "any"),
        (0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", [], "any"),
        (0x0F, "RC_RDMA_READ_RESPONSE_LAST", ["aeth"], "any"),
        (0x10, "RC_RDMA_READ_RESPONSE_ONLY", ["aeth"], "any"),
        (0x11, "RC_ACKNOWLEDGE", ["aeth"], None),
        (0x12, "RC_ATOMIC_ACKNOWLEDGE", ["aeth", "atomic_ack"], None),
        (0x13, "RC_COMPARE_SWAP", ["atomic"], None),
        (0x14, "RC_FETCH_ADD", ["atomic"], None),
        (0x16, "RC_SEND_LAST_WITH_INVALIDATE", ["ieth"], "any"),
        (0x17, "RC_SEND_ONLY_WITH_INVALIDATE", ["ieth"], "any"),
        (0x1C, "RC_FLUSH", ["feth", "reth"], None),
        (0x1D, "RC_ATOMIC_WRITE", ["reth"], 8),
    ]
    + [(0x20 + c, "UC_" + n, h, p) for (c, n, h, p) in _RC_UC_COMMON]
    + [
        (0x64, "UD_SEND_ONLY", ["deth"], "any"),
        (0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", ["deth", "immdt"], "any"),
        (0x81, "CNP", ["cnp_reserved"], None),
    ]
)
EXT_KEYS = ["deth", "feth", "reth", "atomic", "aeth", "atomic_ack", "immdt", "ieth"]


class Rng:
    """Deterministic draws built only on getrandbits (stable across Python versions)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def bits(self, n):
        return self.r.getrandbits(n)

    def below(self, n):
        k = max(1, (n - 1).bit_length())
        while True:
            v = self.r.getrandbits(k)
            if v < n:
                return v

    def between(self, lo, hi):  # inclusive
        return lo + self.below(hi - lo + 1)

    def flag(self):
        return self.bits(1) == 1

    def choice(self, seq):
        return seq[self.below(len(seq))]

    def data(self, n):
        return bytes(self.bits(8) for _ in range(n))

    def u24(self):
        # Edge values now and then.
        return self.choice([0, 1, 0xFFFFFF, 0x7FFFFF, 0x800000]) if self.below(8) == 0 else self.bits(24)

    def u32(self):
        return self.choice([0, 0xFFFFFFFF, 0x80010000]) if self.below(8) == 0 else self.bits(32)

    def u64(self):
        return self.choice([0, 0xFFFFFFFFFFFFFFFF, 1 << 63]) if self.below(8) == 0 else self.bits(64)


def mac_str(b):
    return ":".join("%02x" % x for x in b)


def rand_ipv4(rng):
    return str(ipaddress.IPv4Address(rng.bits(32)))


def rand_ipv6(rng):
    k = rng.below(4)
    if k == 0:  # IPv4-mapped (a RoCEv2 GID for an IPv4 address)
        v = (0xFFFF << 32) | rng.bits(32)
    elif k == 1:  # link-local with a random interface id
        v = (0xFE80 << 112) | rng.bits(64)
    else:
        v = rng.bits(128)
    return ipaddress.IPv6Address(v).exploded


def payload_len(rng, spec):
    if spec is None:
        return 0
    if spec != "any":
        return spec
    k = rng.below(20)
    if k < 3:
        return rng.between(0, 4)  # every PadCnt, empty payload
    if k < 14:
        return rng.between(5, 64)
    return rng.between(65, 256)


def rand_aeth(rng):
    kind = rng.choice(["ack", "ack", "rnr", "nak", "nak", "resv"])
    if kind == "ack":
        val = rng.choice([0x1F, rng.below(32)])
        syn = val
    elif kind == "rnr":
        val = rng.below(32)
        syn = 0x20 | val
    elif kind == "nak":
        val = rng.choice([0, 1, 2, 3, 4, rng.below(32)])
        syn = 0x60 | val
    else:  # reserved encodings: type 0b10, or bit 7 set
        syn = rng.choice([0x40 | rng.below(32), 0x80 | rng.below(128)])
        val = syn
    return {"syn": syn, "kind": kind, "val": val, "msn": rng.u24()}


def rand_ext(rng, kind):
    if kind == "deth":
        return {"qkey": rng.u32(), "srcqp": rng.u24()}
    if kind == "feth":
        return {"sel": rng.below(4), "plt": rng.below(16)}
    if kind == "reth":
        return {"va": rng.u64(), "rkey": rng.u32(), "dlen": rng.u32()}
    if kind == "atomic":
        return {"va": rng.u64(), "rkey": rng.u32(), "swap_add": rng.u64(), "cmp": rng.u64()}
    if kind == "aeth":
        return rand_aeth(rng)
    if kind == "atomic_ack":
        return {"orig": rng.u64()}
    if kind in ("immdt", "ieth"):
        return rng.u32()
    raise ValueError(kind)


def pack_ext(kind, v):
    """Big-endian encodings of the headers scapy has no class for."""
    if kind == "deth":
        return struct.pack("!IB", v["qkey"], 0) + v["srcqp"].to_bytes(3, "big")
    if kind == "feth":
        return struct.pack("!I", (v["sel"] << 4) | v["plt"])
    if kind == "reth":
        return struct.pack("!QII", v["va"], v["rkey"], v["dlen"])
    if kind == "atomic":
        return struct.pack("!QIQQ", v["va"], v["rkey"], v["swap_add"], v["cmp"])
    if kind == "atomic_ack":
        return struct.pack("!Q", v["orig"])
    if kind in ("immdt", "ieth"):
        return struct.pack("!I", v)
    raise ValueError(kind)


# --- a second, tiny ICRC and UDP checksum (the third opinion next to scapy and wire) ---

def py_icrc(l3):
    """ICRC of an IP packet `l3` (IP header .. pad, ICRC excluded), as the 4 wire bytes."""
    b = bytearray(l3)
    if b[0] >> 4 == 6:
        ip = 40
        b[0] |= 0x0F
        b[1:4] = b"\xff\xff\xff"
        b[7] = 0xFF
    else:
        ip = 20
        b[1] = 0xFF
        b[8] = 0xFF
        b[10:12] = b"\xff\xff"
    b[ip + 6:ip + 8] = b"\xff\xff"
    b[ip + 8 + 4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF)


def _sum16(b):
    if len(b) % 2:
        b = b + b"\x00"
    return sum(struct.unpack("!%dH" % (len(b) // 2), b))


def udp_raw_sum(l3):
    """Ones'-complement sum (folded, not complemented) of pseudo-header + UDP datagram."""
    if l3[0] >> 4 == 6:
        src, dst, udp = l3[8:24], l3[24:40], l3[40:]
    else:
        src, dst, udp = l3[12:16], l3[16:20], l3[20:]
    s = _sum16(src) + _sum16(dst) + 17 + len(udp) + _sum16(bytes(udp[:6]) + b"\x00\x00" + bytes(udp[8:]))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


# --- building with scapy ---

def scapy_modules():
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    try:
        import scapy
        from scapy.contrib.roce import AETH, BTH, CNPPadding
        from scapy.layers.inet import IP, UDP
        from scapy.layers.inet6 import IPv6
        from scapy.layers.l2 import Dot1Q, Ether
        from scapy.packet import Raw
    except ImportError as e:  # pragma: no cover
        sys.exit("gen_scapy_vectors.py needs scapy (pip install scapy): %s" % e)
    return dict(version=scapy.VERSION, AETH=AETH, BTH=BTH, CNPPadding=CNPPadding, IP=IP, UDP=UDP,
                IPv6=IPv6, Dot1Q=Dot1Q, Ether=Ether, Raw=Raw)


def build(S, v):
    """Build the frame described by vector `v` with scapy; returns bytes."""
    e = v["eth"]
    pkt = S["Ether"](src=e["src"], dst=e["dst"])
    if e["vlan"] is not None:
        t = e["vlan"]
        pkt = pkt / S["Dot1Q"](prio=t["pcp"], dei=int(t["dei"]), vlan=t["vid"])
    ip = v["ip"]
    tos = (ip["dscp"] << 2) | ip["ecn"]
    if ip["v"] == 4:
        pkt = pkt / S["IP"](src=ip["src"], dst=ip["dst"], tos=tos, id=ip["id"],
                            flags="DF" if ip["df"] else 0, ttl=ip["ttl"])
    else:
        pkt = pkt / S["IPv6"](src=ip["src"], dst=ip["dst"], tc=tos, fl=ip["fl"], hlim=ip["hlim"])
    u = v["udp"]
    pkt = pkt / S["UDP"](sport=u["sport"], dport=u["dport"], chksum=None if u["csum"] else 0)
    b = v["bth"]
    pkt = pkt / S["BTH"](opcode=v["op"], solicited=int(b["se"]), migreq=int(b["mig"]),
                         padcount=b["pad"], version=0, pkey=b["pkey"], fecn=int(b["fecn"]),
                         becn=int(b["becn"]), resv6=0, dqpn=b["dqpn"], ackreq=int(b["ackreq"]),
                         resv7=0, psn=b["psn"])
    info = OPINFO[v["op"]]
    raw = b""
    for kind in info[2]:
        if kind == "cnp_reserved":
            pkt = pkt / S["CNPPadding"](reserved1=0, reserved2=0)
        elif kind == "aeth":
            a = v["aeth"]
            pkt = pkt / S["AETH"](syndrome=a["syn"], msn=a["msn"])
        else:
            raw += pack_ext(kind, v[kind])
    raw += bytes.fromhex(v["payload"]) + b"\x00" * b["pad"]
    if raw:
        pkt = pkt / S["Raw"](load=raw)
    return bytes(pkt)


OPINFO = {o[0]: o for o in OPCODES}


def make_vector(rng, op, ipv):
    code, name, headers, pay = OPINFO[op]
    plen = payload_len(rng, pay)
    v = {"op": code, "name": name}
    v["eth"] = {
        "src": mac_str(rng.data(6)),
        "dst": mac_str(rng.data(6)),
        "vlan": {"pcp": rng.below(8), "dei": rng.flag(), "vid": rng.below(4096)} if rng.flag() else None,
    }
    dscp, ecn = rng.below(64), rng.below(4)
    if ipv == 4:
        v["ip"] = {"v": 4, "src": rand_ipv4(rng), "dst": rand_ipv4(rng), "dscp": dscp, "ecn": ecn,
                   "ttl": rng.below(256), "id": rng.bits(16), "df": rng.flag()}
    else:
        v["ip"] = {"v": 6, "src": rand_ipv6(rng), "dst": rand_ipv6(rng), "dscp": dscp, "ecn": ecn,
                   "fl": rng.choice([0, 0xFFFFF, rng.bits(20), rng.bits(20)]), "hlim": rng.below(256)}
    sport = rng.choice([0, 0xC000 | rng.bits(14), rng.bits(16)])
    v["udp"] = {"sport": sport, "dport": ROCE_PORT, "csum": rng.flag()}
    v["bth"] = {
        "se": rng.flag(), "mig": rng.flag(), "pad": (-plen) & 3,
        "pkey": rng.choice([0xFFFF, 0x7FFF, 0, rng.bits(16)]),
        "fecn": rng.flag(), "becn": rng.flag(), "dqpn": rng.u24(), "ackreq": rng.flag(), "psn": rng.u24(),
    }
    for k in EXT_KEYS:
        v[k] = rand_ext(rng, k) if k in headers else None
    v["payload"] = rng.data(plen).hex()
    return v


def force_udp_csum_ffff(S, rng, v):
    """Choose the UDP source port so the computed checksum is 0, which RFC 768 / RFC 8200 send
    as 0xffff. The ICRC covers the port, so search with py_icrc, then let scapy build it."""
    v["udp"]["csum"] = False
    for _ in range(8):
        base = bytearray(build(S, v))
        l2 = 18 if v["eth"]["vlan"] else 14
        l3 = base[l2:]
        udp = 40 if v["ip"]["v"] == 6 else 20
        for sport in range(65536):
            l3[udp:udp + 2] = struct.pack("!H", sport)
            l3[-4:] = py_icrc(bytes(l3[:-4]))
            if udp_raw_sum(bytes(l3)) == 0xFFFF:
                v["udp"]["sport"] = sport
                v["udp"]["csum"] = True
                return v
        v["bth"]["psn"] = rng.bits(24)  # try another packet
    raise RuntimeError("no source port gives a zero UDP checksum")


def check_frame(n, v, frame):
    """Sanity checks of scapy's output that do not depend on the wire crate."""
    l2 = 18 if v["eth"]["vlan"] else 14
    iph = 40 if v["ip"]["v"] == 6 else 20
    hdr = 12 + sum({"deth": 8, "feth": 4, "reth": 16, "atomic": 28, "aeth": 4, "atomic_ack": 8,
                    "immdt": 4, "ieth": 4, "cnp_reserved": 16}[k] for k in OPINFO[v["op"]][2])
    plen = len(v["payload"]) // 2
    want = l2 + iph + 8 + hdr + plen + v["bth"]["pad"] + 4
    assert len(frame) == want, (n, len(frame), want)
    l3 = frame[l2:]
    assert py_icrc(l3[:-4]) == l3[-4:], "scapy ICRC disagrees with py_icrc at vector %d" % n
    ck = struct.unpack("!H", l3[iph + 6:iph + 8])[0]
    if v["udp"]["csum"]:
        want_ck = ~udp_raw_sum(l3) & 0xFFFF
        assert ck == (want_ck or 0xFFFF), (n, ck, want_ck)
    else:
        assert ck == 0, n


def generate(path):
    S = scapy_modules()
    rng = Rng(SEED)
    vectors = []
    for _ in range(ROUNDS):
        for op in OPINFO:
            for ipv in (4, 6):
                vectors.append(make_vector(rng, op, ipv))
    # Edge cases: a computed UDP checksum of 0 goes on the wire as 0xffff (IPv4 and IPv6).
    for op, ipv in ((0x04, 4), (0x0A, 6), (0x11, 4), (0x65, 6)):
        v = make_vector(rng, op, ipv)
        vectors.append(force_udp_csum_ffff(S, rng, v))
    lines = []
    for n, v in enumerate(vectors):
        frame = build(S, v)
        check_frame(n, v, frame)
        v["frame"] = frame.hex()
        lines.append(json.dumps(v, separators=(",", ":")))
    meta = {"meta": {"generator": "wire/tests/oracle/gen_scapy_vectors.py", "scapy": S["version"],
                     "python": platform.python_version(), "seed": SEED, "count": len(vectors)}}
    with open(path, "w") as f:
        f.write(json.dumps(meta, separators=(",", ":")) + "\n")
        for line in lines:
            f.write(line + "\n")
    return len(vectors)


def check():
    with tempfile.TemporaryDirectory() as d:
        tmp = os.path.join(d, "scapy_vectors.jsonl")
        generate(tmp)
        with open(tmp) as f:
            new = f.read().splitlines()
    try:
        with open(DATA) as f:
            old = f.read().splitlines()
    except FileNotFoundError:
        print("DRIFT: %s is missing; run with --write" % DATA)
        return 1
    # The header records the scapy and Python versions: a different version that yields the
    # same bytes is not drift, only worth a note.
    mo, mn = json.loads(old[0])["meta"], json.loads(new[0])["meta"]
    for k in ("scapy", "python"):
        if mo.get(k) != mn.get(k):
            print("note: committed data made with %s %s, this run uses %s" % (k, mo.get(k), mn.get(k)))
            mo.pop(k, None)
            mn.pop(k, None)
    if mo != mn:
        print("DRIFT: header differs: committed %s, regenerated %s" % (mo, mn))
        return 1
    if old[1:] != new[1:]:
        for i, (a, b) in enumerate(zip(old[1:], new[1:])):
            if a != b:
                ja, jb = json.loads(a), json.loads(b)
                keys = [k for k in sorted(set(ja) | set(jb)) if ja.get(k) != jb.get(k)]
                print("DRIFT: vector %d (%s) differs in %s" % (i, jb.get("name"), ", ".join(keys)))
                for k in keys:
                    print("  %s committed:   %s\n  %s regenerated: %s"
                          % (k, str(ja.get(k))[:400], k, str(jb.get(k))[:400]))
                break
        else:
            print("DRIFT: %d committed vectors, %d regenerated" % (len(old) - 1, len(new) - 1))
        return 1
    print("ok: %s matches the generator (%d vectors)" % (os.path.relpath(DATA), len(new) - 1))
    return 0


def crosscheck_rxe(directory):
    """Evidence that scapy's ICRC is the one real Linux rxe sends: re-compute the ICRC of every
    RoCEv2 frame of the pcaps in `directory` with scapy and compare (not used by --check)."""
    S = scapy_modules()
    from scapy.utils import rdpcap
    same = differ = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".pcap"):
            continue
        for p in rdpcap(os.path.join(directory, name)):
            if S["UDP"] not in p or p[S["UDP"]].dport != ROCE_PORT or S["BTH"] not in p:
                continue
            raw = bytes(p)
            q = S["Ether"](raw)
            q[S["BTH"]].icrc = None  # make scapy compute it
            if bytes(q) == raw:
                same += 1
            else:
                differ += 1
                print("ICRC differs: %s %s" % (name, raw.hex()))
    print("scapy recomputes the captured ICRC of %d RoCEv2 frames, differs on %d" % (same, differ))
    return 1 if differ or not same else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="rewrite %s" % os.path.basename(DATA))
    g.add_argument("--check", action="store_true", help="exit 1 if the committed data drifted")
    g.add_argument("--crosscheck-rxe", metavar="PCAP_DIR",
                   help="compare scapy's ICRC with real rxe captures (e.g. rxe-compat/fixtures/rxe-public)")
    a = ap.parse_args()
    if a.crosscheck_rxe:
        return crosscheck_rxe(a.crosscheck_rxe)
    if a.write:
        n = generate(DATA)
        print("wrote %d vectors to %s (%d bytes)" % (n, DATA, os.path.getsize(DATA)))
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())

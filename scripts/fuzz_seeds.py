#!/usr/bin/env python3
"""Seeds the fuzz corpora (fuzz/corpus/<target>/) from the repository's own
inputs: frames and captures from `flowshift gen`, the golden tests' chain
configurations and rules, and IDS payloads. Usage: fuzz_seeds.py PCAP PCAPNG
CORPUS_DIR (run by scripts/fuzz.sh)."""

import glob
import os
import re
import struct
import sys


def frames(pcap):
    """The frames of a little-endian microsecond or nanosecond pcap."""
    data = open(pcap, "rb").read()
    off, out = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack_from("<IIII", data, off)
        out.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return out


def put(corpus, target, name, blob):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(blob)


def main():
    pcap, pcapng, corpus = sys.argv[1:4]
    fs = frames(pcap)
    for i, f in enumerate(fs[:64]):
        put(corpus, "packet", f"frame{i}", f)
    for c in (0, 1):
        for i in range(0, min(len(fs), 160), 20):
            seq = bytes([c]) + b"".join(struct.pack("<H", len(f)) + f for f in fs[i : i + 20])
            put(corpus, "chain", f"chain{c}-{i}", seq)
    put(corpus, "capture", "gen.pcap", open(pcap, "rb").read())
    put(corpus, "capture", "gen.pcapng", open(pcapng, "rb").read())

    golden = sorted(glob.glob("crates/nf/tests/golden/*.test"))
    for g in golden:
        text = open(g).read()
        m = re.search(r"%config\n(.*?)\n%packets", text, re.S)
        if m:
            put(corpus, "config", os.path.basename(g), m.group(1).encode())
        for rules in re.findall(r"rules = '''\n(.*?)'''", text, re.S):
            put(corpus, "rules", "ids-" + os.path.basename(g), b"\x02" + rules.encode())
        for rules in re.findall(r'rules = "(.*?)"', text):
            put(corpus, "rules", "acl-" + os.path.basename(g), b"\x00" + rules.replace("\\n", "\n").encode())
        for routes in re.findall(r"routes = \[(.*?)\]", text):
            lines = "\n".join(re.findall(r'"(.*?)"', routes))
            put(corpus, "rules", "routes-" + os.path.basename(g), b"\x01" + lines.encode())
    put(corpus, "config", "trace-spec", b'flows = 100\npackets = 1000\nalpha = 1.1\nsizes = "imix"\n')
    put(corpus, "rules", "acl-mixed",
        b"\x00allow tcp 10.0.0.0/8:1024-65535 -> 198.18.0.0/15:443\n"
        b"deny udp any:53 -> 10.0.0.0/8\nallow icmp6 [fd00::/8]:1-2 -> any\nallow 47 any -> any\ndeny any any -> any\n")

    for i, p in enumerate([b"GET /admin HTTP/1.1", b"user=abc123; attack SELECT x y z",
                           b"aaaaabbbbc attack", b"xxyyzz GET /adm user=zz9;"]):
        put(corpus, "ids_stream", f"payload{i}", bytes([3, 40, 120, 200]) + p)

    # pool messages' bodies (pool::protocol: `FS`, a kind byte, its fields):
    # heartbeat, alive, bulk orders and status, a re-ring order, an
    # acknowledgement, a bulk copy (seq, hash, entry), copies (port, seq,
    # entry length, entry, frame) carrying generated frames, and steered frames
    v4 = b"\x04\x0a\x4d\x00\x02\x1e\x14"  # 10.77.0.2:7700
    for name, body in [("heartbeat", b"FS\x04"), ("alive", b"FS\x05"),
                       ("rering", b"FS\x06" + v4), ("start", b"FS\x07" + v4),
                       ("stop", b"FS\x08"), ("query", b"FS\x09"),
                       ("status", b"FS\x0a" + bytes(8) + b"\x01" + bytes(7) + b"\x05" + v4),
                       ("ack", b"FS\x03\x00\x00\x00\x07"),
                       ("install", b"FS\x02\x00\x00\x00\x01\x12\x34\x56\x78\x00\x02\x00\x00")]:
        put(corpus, "pool", name, body)
    for i, f in enumerate(frames(pcap)[:20]):
        put(corpus, "pool", f"replica{i}", b"FS\x01\x00\x00\x00\x00\x05\x00\x00" + f)
        if i < 5:
            # a frame a spilling node steers on (port 0)
            put(corpus, "pool", f"steer{i}", b"FS\x0b\x00" + f)


if __name__ == "__main__":
    main()

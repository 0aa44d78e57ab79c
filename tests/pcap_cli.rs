//! `uroce pcap` end to end: output lines, the summary line, and the exit status.

mod common;

use std::process::Command;

fn uroce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_uroce"))
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-pcap-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn sample_capture_is_clean() {
    let p = tmp("sample.pcap");
    assert!(uroce().args(["gen-pcap", p.to_str().unwrap()]).status().unwrap().success());
    let out = uroce().args(["pcap", p.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().last().unwrap(), "packets: 80 roce: 80 icrc_ok: 80 icrc_bad: 0 undecodable: 0");
    assert!(text.contains("RC_RDMA_WRITE_FIRST qp 0x000011 psn 0x9a6106 reth va=0x5634dca75000"), "{text}");
    assert_eq!(text.lines().filter(|l| l.ends_with("icrc ok")).count(), 80);
}

#[test]
fn bad_icrc_and_undecodable_frames_fail() {
    let p = tmp("sample2.pcap");
    assert!(uroce().args(["gen-pcap", p.to_str().unwrap()]).status().unwrap().success());
    let mut frames = uroce::pcap::read_capture(&p).unwrap();
    // Corrupt the last ICRC byte of frame 1, and truncate frame 2 inside its BTH (fixing the IP and
    // UDP lengths so only the RoCE layer is wrong).
    let f1 = &mut frames[0].data;
    let n = f1.len();
    f1[n - 1] ^= 1;
    let f2 = &mut frames[1].data;
    f2.truncate(14 + 20 + 8 + 6);
    f2[16..18].copy_from_slice(&34u16.to_be_bytes());
    f2[38..40].copy_from_slice(&14u16.to_be_bytes());
    f2[24..26].copy_from_slice(&[0, 0]);
    let c = uroce::wire::ipv4::internet_checksum(&f2[14..34]);
    f2[24..26].copy_from_slice(&c.to_be_bytes());
    let q = tmp("bad.pcap");
    let mut w = uroce::pcap::CaptureWriter::new(std::fs::File::create(&q).unwrap()).unwrap();
    for f in &frames {
        w.write(f.timestamp, &f.data).unwrap();
    }
    drop(w.into_inner());
    let out = uroce().args(["pcap", q.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().last().unwrap(), "packets: 80 roce: 79 icrc_ok: 78 icrc_bad: 1 undecodable: 1");
    assert!(text.lines().next().unwrap().ends_with("icrc BAD"), "{text}");
    assert!(text.contains("UNDECODABLE: BTH at offset 42: truncated"), "{text}");
}

#[test]
fn real_rxe_captures_are_clean() {
    // The public rxe captures and the project's own rxe fixtures, both in the repository.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rxe-compat/fixtures");
    for (dir, want) in [
        (root.join("rxe-public"), "packets: 535 roce: 301 icrc_ok: 301 icrc_bad: 0 undecodable: 0"),
        (root, "packets: 2870 roce: 1060 icrc_ok: 1060 icrc_bad: 0 undecodable: 0"),
    ] {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
            .collect();
        files.sort();
        let out = uroce().arg("pcap").arg("-q").args(&files).output().unwrap();
        assert!(out.status.success(), "{}", dir.display());
        assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), want, "{}", dir.display());
    }
}

#[test]
fn missing_file_is_an_error() {
    let out = uroce().args(["pcap", "/nonexistent.pcap"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("open /nonexistent.pcap"));
}

#[test]
fn cm_mads_print_by_message() {
    // rping's connection through rdma_cm (its default port 7174), as rxe sent it.
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rxe-compat/fixtures/rxe-public/rping.pcap");
    let out = uroce().arg("pcap").arg(&f).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let cm: Vec<&str> = text.lines().filter_map(|l| l.split_once(" CM ").map(|(_, m)| m)).collect();
    let names: Vec<&str> = cm.iter().map(|m| m.split(' ').next().unwrap()).collect();
    assert_eq!(names, ["REQ", "REP", "RTU", "DREQ", "DREP"], "{text}");
    assert!(cm[0].contains("sid=0x0000000001061c06 (TCP 7174)"), "{}", cm[0]);
    assert!(text.lines().filter(|l| l.contains(" CM ")).all(|l| l.ends_with("icrc ok")), "{text}");
}

/// `uroce pcap --flows` on a capture with a known story: a WRITE of five packets whose third
/// never passed the capture point, the responder's PSN-sequence NAK, Go-Back-N from the lost
/// PSN, the ACK, then a CE-marked SEND and the CNP it earns.
#[test]
fn flows_tell_a_go_back_n_story() {
    use std::time::Duration;
    use uroce::sample::frame_repr;
    use uroce_wire::*;
    let p = tmp("flows.pcap");
    let mut w = uroce::pcap::CaptureWriter::new(std::fs::File::create(&p).unwrap()).unwrap();
    let t = std::cell::Cell::new(1_700_000_000_000_000u64);
    let mut put = |op: Opcode, psn: u32, back: bool, edit: &dyn Fn(&mut FrameRepr)| {
        let mut r = frame_repr(op, 1024, false, psn);
        if back {
            if let IpRepr::V4(v) = &mut r.ip {
                std::mem::swap(&mut v.src_addr, &mut v.dst_addr);
            }
            r.roce.bth.dest_qp = Qpn::new(0x22);
        }
        edit(&mut r);
        let mut buf = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut buf, UdpChecksum::Zero, |b| b.fill(7)).unwrap();
        t.set(t.get() + 10);
        w.write(Duration::from_micros(t.get()), &buf[..n]).unwrap();
    };
    let none = |_: &mut FrameRepr| {};
    put(Opcode::RC_RDMA_WRITE_FIRST, 100, false, &none);
    put(Opcode::RC_RDMA_WRITE_MIDDLE, 101, false, &none);
    put(Opcode::RC_RDMA_WRITE_MIDDLE, 103, false, &none); // 102 lost before the capture point
    put(Opcode::RC_RDMA_WRITE_LAST, 104, false, &none);
    let nak = |r: &mut FrameRepr| {
        r.roce.ext.aeth = Some(AethRepr { syndrome: Syndrome::Nak(NakCode::PsnSequenceError), msn: Msn::new(0) })
    };
    put(Opcode::RC_ACKNOWLEDGE, 102, true, &nak);
    t.set(t.get() + 250); // the requester takes 260 µs to go back (its last frame was 20 µs before the NAK)
    put(Opcode::RC_RDMA_WRITE_MIDDLE, 102, false, &none);
    put(Opcode::RC_RDMA_WRITE_MIDDLE, 103, false, &none);
    put(Opcode::RC_RDMA_WRITE_LAST, 104, false, &none);
    put(Opcode::RC_ACKNOWLEDGE, 104, true, &none);
    let ce = |r: &mut FrameRepr| r.ip.set_ecn(Ecn::Ce);
    put(Opcode::RC_SEND_ONLY, 105, false, &ce);
    put(Opcode::CNP, 0, true, &none);
    drop(w);
    let o = uroce().args(["pcap", "--flows", p.to_str().unwrap()]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let a = out.lines().position(|l| l.starts_with("flow 10.77.0.11 -> 10.77.0.12 qp 0x000011:")).expect(&out);
    let b = out.lines().position(|l| l.starts_with("flow 10.77.0.12 -> 10.77.0.11 qp 0x000022:")).expect(&out);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[a].contains(": 8 packets, 2 messages, 5120 payload bytes"), "{out}");
    assert!(lines[a + 1].contains("RC_RDMA_WRITE_MIDDLE 4"), "{out}");
    assert_eq!(
        lines[a + 2],
        "  psn 0x000064..0x00006a: retransmissions 1 (3 packets, 3072 bytes), gaps 1 (1 PSNs missing)",
        "{out}"
    );
    assert_eq!(lines[a + 3], "  silence before retransmissions: 0.270 ms in all, longest 0.270 ms", "{out}");
    assert_eq!(lines[a + 4], "  longest silence 0.270 ms", "{out}");
    assert!(lines[a + 5..b].contains(&"  ecn: 0 ECT, 1 CE; cnps 0"), "{out}");
    assert!(lines[b..].contains(&"  acks 1, rnr naks 0, naks: PSN sequence error 1"), "{out}");
    assert!(lines[b..].iter().any(|l| l.ends_with("cnps 1")), "{out}");
    assert!(out.lines().last().unwrap().starts_with("packets: 11 roce: 11 icrc_ok: 11"), "{out}");
    // The sequence graph of the WRITE's flow (the ACK flow has no PSN order: no graph).
    let dir = tmp("flows-plot");
    let _ = std::fs::remove_dir_all(&dir);
    let o = uroce().args(["pcap", "--flows", "--plot", dir.to_str().unwrap(), p.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success());
    let svg = std::fs::read_to_string(dir.join("psn-10.77.0.11-10.77.0.12-qp000011.svg")).expect("the WRITE's graph");
    assert!(svg.starts_with("<svg") && svg.contains("<polyline") && svg.contains("qp 0x000011"));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "one PSN-ordered flow");
}

#[test]
fn extract_writes_every_roce_frame_as_it_was_captured() {
    let p = tmp("extract.pcap");
    assert!(uroce().args(["gen-pcap", p.to_str().unwrap()]).status().unwrap().success());
    let dir = tmp("extracted");
    let out = uroce().args(["pcap", "-q", "--extract", dir.to_str().unwrap(), p.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 80);
    // each file is one frame, byte for byte what the capture holds: it parses with a good ICRC
    for f in &files {
        let b = std::fs::read(f).unwrap();
        uroce::wire::parse_frame_verified(&b).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    assert!(files[0].file_name().unwrap().to_string_lossy().starts_with("extract-"));
}

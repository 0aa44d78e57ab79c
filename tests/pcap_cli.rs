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

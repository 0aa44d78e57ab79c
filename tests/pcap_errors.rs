//! `uroce pcap` on broken input and a closed stdout (issue 12, point 7): a truncated capture
//! shows the frames before the cut, then says where it was cut (as tshark does); an empty file,
//! a file that is no capture and a cut header each say what is wrong (not `failed to fill whole
//! buffer`); `uroce pcap big.pcap | head` ends quietly with success (not `Broken pipe`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-pcap-errors-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The sample capture (`uroce gen-pcap`): 80 frames, in a file of its own for each call
/// (the tests run in parallel: one writing the file while another reads it saw it empty).
fn sample() -> (std::path::PathBuf, Vec<u8>) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let p = tmp(&format!("sample-{}.pcap", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    assert!(Command::new(BIN).args(["gen-pcap", p.to_str().unwrap()]).output().unwrap().status.success());
    let bytes = std::fs::read(&p).unwrap();
    (p, bytes)
}

/// Byte offsets where each record of a classic pcap starts (after the 24-byte header).
fn record_starts(pcap: &[u8]) -> Vec<usize> {
    let big_endian = pcap[0] == 0xa1;
    let mut at = 24;
    let mut v = vec![];
    while at + 16 <= pcap.len() {
        v.push(at);
        let field: [u8; 4] = pcap[at + 8..at + 12].try_into().unwrap();
        let incl = if big_endian { u32::from_be_bytes(field) } else { u32::from_le_bytes(field) } as usize;
        at += 16 + incl;
    }
    assert_eq!(at, pcap.len());
    v
}

fn pcap(path: &std::path::Path) -> (Option<i32>, String, String) {
    let o = Command::new(BIN).arg("pcap").arg(path).output().unwrap();
    (o.status.code(), String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

#[test]
fn a_truncated_capture_shows_the_frames_before_the_cut_then_where_it_was_cut() {
    let (_, bytes) = sample();
    let starts = record_starts(&bytes);
    // Cut inside record 31's data (30 whole frames before it) and inside its 16-byte header.
    for (cut, what) in [(starts[30] + 16 + 5, "in a record's data"), (starts[30] + 7, "in a record header")] {
        let p = tmp("cut.pcap");
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let (code, out, err) = pcap(&p);
        assert_eq!(code, Some(2), "{what}: {err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 31, "{what}: 30 frames and the summary:\n{out}");
        assert!(lines[..30].iter().all(|l| l.ends_with("icrc ok")), "{what}:\n{out}");
        assert!(lines[29].trim_start().starts_with("30 "), "{what}: {}", lines[29]);
        assert_eq!(lines[30], "packets: 30 roce: 30 icrc_ok: 30 icrc_bad: 0 undecodable: 0", "{what}");
        let want = format!(
            "uroce: {}: truncated at byte {cut}: cut short {} bytes into the record at byte {}, after 30 frames\n",
            p.display(),
            cut - starts[30],
            starts[30]
        );
        assert_eq!(err, want, "{what}");
    }
}

#[test]
fn a_truncated_pcapng_also_shows_its_frames() {
    // The same frames as pcapng (section header, interface description, enhanced packets),
    // written with pcap-file's writer, cut inside the last block.
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    let (p, _) = sample();
    let frames = uroce::pcap::read_capture(&p).unwrap();
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen: 65535,
        options: vec![],
    })
    .unwrap();
    for f in &frames[..10] {
        let b = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: f.timestamp,
            original_len: f.data.len() as u32,
            data: std::borrow::Cow::Borrowed(&f.data),
            options: vec![],
        };
        w.write_pcapng_block(b).unwrap();
    }
    let bytes = w.into_inner();
    let q = tmp("cut.pcapng");
    std::fs::write(&q, &bytes[..bytes.len() - 9]).unwrap();
    let (code, out, err) = pcap(&q);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(out.lines().count(), 10, "{out}");
    assert_eq!(out.lines().last().unwrap(), "packets: 9 roce: 9 icrc_ok: 9 icrc_bad: 0 undecodable: 0");
    assert!(err.contains(&format!("truncated at byte {}", bytes.len() - 9)) && err.contains("after 9 frames"), "{err}");
}

#[test]
fn empty_foreign_and_headless_files_say_what_is_wrong() {
    let (_, bytes) = sample();
    let cases: [(&str, &[u8], String); 5] = [
        ("empty.pcap", b"", "empty file (0 bytes), not a capture".into()),
        ("text.pcap", b"hello world\n", "not a pcap or pcapng file (it starts with 0x68656c6c; 12 bytes)".into()),
        ("short.pcap", &bytes[..2], "truncated at byte 2: the file ends inside its header".into()),
        ("short.pcapng", b"\x0a\x0d", "truncated at byte 2: the file ends inside its header".into()),
        ("header.pcap", &bytes[..10], "truncated at byte 10: the file ends inside its header".into()),
    ];
    for (name, content, msg) in cases {
        let p = tmp(name);
        std::fs::write(&p, content).unwrap();
        let (code, out, err) = pcap(&p);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert_eq!(out, "", "{name}");
        assert_eq!(err, format!("uroce: {}: {msg}\n", p.display()), "{name}");
        assert!(!err.contains("failed to fill whole buffer"), "{name}");
    }
}

#[test]
fn a_closed_stdout_ends_the_program_quietly_with_success() {
    // A capture big enough that its listing (~9 MB) cannot all sit in the pipe when the reader
    // goes away after one line, as `head -1` does.
    let (p, _) = sample();
    let frames = uroce::pcap::read_capture(&p).unwrap();
    let big = tmp("big.pcap");
    let mut w = uroce::pcap::CaptureWriter::new(std::io::BufWriter::new(std::fs::File::create(&big).unwrap())).unwrap();
    for i in 0..1000u64 {
        for f in &frames {
            w.write(f.timestamp + Duration::from_micros(i), &f.data).unwrap();
        }
    }
    drop(w.into_inner());
    let mut child =
        Command::new(BIN).arg("pcap").arg(&big).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    // The reader (and with it the pipe's only read end) is gone here.
    assert!(first.contains("RC_SEND_FIRST"), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err, "", "nothing on stderr");
}

//! Cross-check: a pcap written by uroce (one frame of every opcode, IPv4 and IPv6) is decoded
//! by tshark with the same opcode, destination QP, PSN, RETH VA and AETH MSN.

mod common;

use uroce::pcap::CaptureWriter;
use uroce::wire::parse_frame;

#[test]
fn tshark_agrees_on_opcode_qp_psn() {
    if !common::require(common::have("tshark"), "tshark (apt install tshark)") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("uroce-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.pcap");
    let frames = uroce::sample::frames();
    let mut w = CaptureWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(std::time::Duration::from_millis(i as u64), f).unwrap();
    }
    drop(w.into_inner());

    let out = std::process::Command::new("tshark")
        .args(["-r", path.to_str().unwrap(), "-T", "fields", "-E", "separator=,"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .args(["-e", "infiniband.reth.va", "-e", "infiniband.aeth.msn"])
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len());
    for (f, line) in frames.iter().zip(&lines) {
        let p = parse_frame(f).unwrap();
        let cols: Vec<&str> = line.split(',').collect();
        let b = &p.roce.bth;
        assert_eq!(cols[0].parse::<u8>().unwrap(), b.opcode.0, "opcode: {line}");
        assert_eq!(u32::from_str_radix(cols[1].trim_start_matches("0x"), 16).unwrap(), b.dest_qp.value(), "{line}");
        assert_eq!(cols[2].parse::<u32>().unwrap(), b.psn.value(), "psn: {line}");
        // tshark 4.0 predates IBA 1.5: it does not decode the RETH of FLUSH (0x1c) and
        // ATOMIC WRITE (0x1d), nor CNP (0x81). Every other opcode's headers must agree.
        let ibta_1_5 = matches!(b.opcode.0, 0x1c | 0x1d | 0x81);
        if let (Some(r), false) = (p.roce.ext.reth, ibta_1_5) {
            assert_eq!(u64::from_str_radix(cols[3].trim_start_matches("0x"), 16).unwrap(), r.va, "va: {line}");
        }
        if let Some(a) = p.roce.ext.aeth {
            assert_eq!(cols[4].parse::<u32>().unwrap(), a.msn.value(), "msn: {line}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

//! Arbitrary bytes as a pcap or pcapng capture: the reader `uroce pcap` streams files with
//! (`uroce_io::capture::read`). Whatever the bytes, it never panics and never allocates
//! without bound (records are capped); it delivers frames until the bytes stop making sense,
//! then fails with a typed `CaptureError` that says what and where; no frame it delivers is
//! longer than the file; every Ethernet frame it delivers goes through the RoCEv2 parser too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use uroce_io::capture::read::{for_each_frame_in, CaptureError};

fuzz_target!(|data: &[u8]| {
    let r = for_each_frame_in(Path::new("fuzz-input"), data, |c| {
        assert!(c.data.len() <= data.len(), "a frame longer than the file");
        if c.linktype == pcap_file::DataLink::ETHERNET {
            let _ = uroce_wire::parse_frame(&c.data);
        }
        Ok(())
    });
    if let Err(e) = r {
        assert!(e.downcast_ref::<CaptureError>().is_some(), "an untyped error: {e:#}");
    }
});

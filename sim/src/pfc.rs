//! PFC frames for the simulator: `uroce_wire::pfc` (the codec the AF_XDP runtime uses too),
//! with an owned frame for the wire.

use uroce_wire::pfc::PfcRepr;
pub use uroce_wire::pfc::{pause_ns, priority, MAX_QUANTA};
use uroce_wire::EthernetAddress;

/// A PFC frame's content.
pub type Pfc = PfcRepr;

/// The frame of `p` from `src`, for the wire.
pub fn frame(p: &Pfc, src: EthernetAddress) -> Vec<u8> {
    let mut f = vec![0u8; uroce_wire::pfc::LEN];
    let _ = p.emit(src, &mut f);
    f
}

/// `f` decoded, if it is a PFC frame.
pub fn parse(f: &[u8]) -> Option<Pfc> {
    uroce_wire::pfc::is_mac_control(f).then(|| PfcRepr::parse(f).ok()).flatten()
}

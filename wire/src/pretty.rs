//! One-line, human-readable summaries of RoCEv2 frames (what `uroce pcap` prints); a MAD on
//! QP1 is decoded too (a CM message by name and its connection's fields).

use crate::aeth::Syndrome;
use crate::cm::{CmMessage, CmSummary};
use crate::mad::{Mad, MgmtClass, GSI_QPN};
use crate::packet::ParsedFrame;
use core::fmt;

/// Displays `src:port -> dst:port OPCODE qp Q psn P [ack] [reth ...] [aeth ...] len N`.
pub struct Summary<'a, 'b>(pub &'b ParsedFrame<'a>);

impl fmt::Display for Summary<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let b = &p.roce.bth;
        let addr = |a: core::net::IpAddr, port: u16| -> AddrPort { AddrPort(a, port) };
        write!(
            f,
            "{} -> {} {} qp {:#08x} psn {:#08x}",
            addr(p.ip.src_addr(), p.udp.src_port),
            addr(p.ip.dst_addr(), p.udp.dst_port),
            b.opcode,
            b.dest_qp.value(),
            b.psn.value()
        )?;
        if b.ack_req {
            f.write_str(" ackreq")?;
        }
        if b.solicited {
            f.write_str(" se")?;
        }
        if b.fecn {
            f.write_str(" fecn")?;
        }
        if b.becn {
            f.write_str(" becn")?;
        }
        let e = &p.roce.ext;
        if let Some(r) = e.reth {
            write!(f, " reth va={:#x} rkey={:#010x} len={}", r.va, r.rkey, r.dma_len)?;
        }
        if let Some(a) = e.atomic_eth {
            write!(f, " atomic va={:#x} rkey={:#010x} swap_add={:#x} cmp={:#x}", a.va, a.rkey, a.swap_add, a.compare)?;
        }
        if let Some(a) = e.aeth {
            write!(f, " aeth {} msn={}", a.syndrome, a.msn.value())?;
            if let Syndrome::Reserved(_) = a.syndrome {
                f.write_str("!")?;
            }
        }
        if let Some(a) = e.atomic_ack_eth {
            write!(f, " orig={:#x}", a.orig)?;
        }
        if let Some(d) = e.deth {
            write!(f, " deth qkey={:#010x} srcqp={:#08x}", d.qkey, d.src_qp.value())?;
        }
        if let Some(i) = e.immdt {
            write!(f, " imm={i:#010x}")?;
        }
        if let Some(i) = e.ieth {
            write!(f, " inv_rkey={i:#010x}")?;
        }
        write!(f, " len {}", p.roce.payload_len)?;
        if b.opcode == crate::Opcode::UD_SEND_ONLY && b.dest_qp == GSI_QPN {
            write!(f, " {}", MadSummary(p.payload(), p.offsets.payload))?;
        }
        Ok(())
    }
}

/// What a GSI (QP1) datagram carries: a CM message's summary, another class's header, or why
/// the bytes are not a MAD.
struct MadSummary<'a>(&'a [u8], usize);

impl fmt::Display for MadSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mad = match Mad::parse(self.0, self.1) {
            Ok(m) => m,
            Err(e) => return write!(f, "MAD! {e}"),
        };
        match CmMessage::parse(&mad, self.1) {
            Ok(m) => write!(f, "{} tid={:#x}", CmSummary(&m), mad.header.tid),
            Err(e) if mad.header.mgmt_class == MgmtClass::CM => write!(f, "CM! {e}"),
            Err(_) => write!(
                f,
                "MAD class={:#04x} method={:#04x} attr={:#06x} tid={:#x}",
                mad.header.mgmt_class.0, mad.header.method.0, mad.header.attr_id, mad.header.tid
            ),
        }
    }
}

struct AddrPort(core::net::IpAddr, u16);

impl fmt::Display for AddrPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            core::net::IpAddr::V4(a) => write!(f, "{a}:{}", self.1),
            core::net::IpAddr::V6(a) => write!(f, "[{a}]:{}", self.1),
        }
    }
}

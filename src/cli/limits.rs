//! The limits of the sizes, depths, counts and durations a user can type, in one place, and the
//! checks that apply them before anything is allocated (issue 12: `uroce demo -s 99999999999`
//! used to abort in the allocator and leave its namespaces behind).
//!
//! Each limit is one [`Limit`] value with the reason an RDMA engineer would recognise (perftest's
//! own bounds, rxe's device attributes, memory sanity). Flags parsed by clap use
//! [`Limit::parser`], so clap itself refuses the value with the limit's one-line message; values
//! whose limit depends on other flags are checked with [`Limit::check`] or [`fits_in_memory`].

use std::ops::RangeInclusive;

/// An inclusive range a flag's value must lie in, and why.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    /// What the value is, e.g. "the message size".
    pub what: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// Unit printed after the bounds, e.g. " bytes" (empty for counts).
    pub unit: &'static str,
    /// Where the bounds come from, printed in parentheses.
    pub why: &'static str,
}

impl Limit {
    /// The accepted range.
    pub fn range(&self) -> RangeInclusive<u64> {
        self.min..=self.max
    }

    /// `Ok(v)` when `v` is within the limit, else the one-line reason.
    pub fn check(&self, v: u64) -> Result<u64, String> {
        if self.range().contains(&v) {
            Ok(v)
        } else {
            Err(format!("{} must be between {} and {}{} ({})", self.what, self.min, self.max, self.unit, self.why))
        }
    }

    /// A clap value parser: a decimal number within the limit.
    pub fn parser(&'static self) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
        move |s: &str| {
            let v: u64 = s.trim().parse().map_err(|_| format!("`{s}` is not a non-negative integer"))?;
            self.check(v)
        }
    }
}

/// perftest's `-s`: `1 ..= UINT_MAX / 2` ("Message Size should be between 1 and 2147483647").
pub const PERFTEST_SIZE: Limit =
    Limit { what: "the message size", min: 1, max: u32::MAX as u64 / 2, unit: " bytes", why: "perftest's -s range" };

/// perftest's `-n` as `uroce perf` takes it (at least 5, as perftest's latency tests need).
pub const PERFTEST_ITERS: Limit =
    Limit { what: "the number of iterations", min: 5, max: 1 << 32, unit: "", why: "perftest's -n range" };

/// The veth pair's link MTU in `uroce demo`: IPv6 (the GID table's link-local and ULA addresses)
/// needs 1280; 9000 already gives the largest RoCE path MTU, 4096.
pub const DEMO_LINK_MTU: Limit = Limit {
    what: "the link MTU",
    min: 1280,
    max: 9000,
    unit: " bytes",
    why: "IPv6 needs 1280; 9000 carries RoCE's largest path MTU, 4096",
};

/// rc_pingpong's `-s`: one SEND per exchange, at most the RC maximum message of 2^31 bytes
/// (rxe's `max_msg_sz`); a zero-length exchange would only time the ACKs.
pub const PINGPONG_SIZE: Limit =
    Limit { what: "the message size", min: 1, max: 1 << 31, unit: " bytes", why: "RC's 2^31-byte maximum message" };

/// rc_pingpong's `-r`: receive WRs kept posted, at most rxe's `max_qp_wr`.
pub const PINGPONG_RX_DEPTH: Limit =
    Limit { what: "the receive depth", min: 1, max: 16384, unit: "", why: "rxe's max_qp_wr" };

/// rc_pingpong's `-n`.
pub const PINGPONG_ITERS: Limit =
    Limit { what: "the number of exchanges", min: 1, max: u32::MAX as u64, unit: "", why: "a 32-bit count" };

/// The TCP port of an out-of-band exchange.
pub const TCP_PORT: Limit = Limit { what: "the TCP port", min: 1, max: 65535, unit: "", why: "a TCP port number" };

/// `--connect-timeout`: how long a client retries its TCP connection.
pub const CONNECT_TIMEOUT: Limit =
    Limit { what: "the connect timeout", min: 0, max: 86_400, unit: " seconds", why: "at most a day" };

/// `--stall-timeout`: how long a run waits for a completion.
pub const STALL_TIMEOUT: Limit =
    Limit { what: "the stall timeout", min: 1, max: 86_400, unit: " seconds", why: "at most a day" };

/// `uroce sim soak --ops`.
pub const SOAK_OPS: Limit = Limit {
    what: "the number of work requests",
    min: 1,
    max: 1_000_000_000,
    unit: "",
    why: "a billion simulated WRs take hours already",
};

/// `uroce sim soak --qps`.
pub const SOAK_QPS: Limit =
    Limit { what: "the number of QP pairs", min: 1, max: 1024, unit: "", why: "a soak's sanity" };

/// `uroce sim soak --max-size`: bounded so that a soak's regions fit in memory (see
/// `uroce_transport::sim::soak::SoakConfig::check`, which also bounds `--qps` × `--max-size`).
pub const SOAK_MAX_SIZE: Limit = Limit {
    what: "the largest message",
    min: 0,
    max: uroce_transport::sim::soak::MAX_MESSAGE as u64,
    unit: " bytes",
    why: "each QP pair keeps 3 x 16 slots of this size in memory",
};

/// `MemAvailable` from `/proc/meminfo`, in bytes (`None` where it cannot be read).
pub fn mem_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb.saturating_mul(1024))
}

/// `bytes` for people: GiB, MiB or bytes.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{b} B"),
    }
}

/// Refuses a run whose buffers (`bytes`, described by `what`) would not fit in the memory this
/// machine has available: better a clear error than the allocator's abort.
pub fn fits_in_memory(what: &str, bytes: u64) -> Result<(), String> {
    fits_in(what, bytes, mem_available())
}

fn fits_in(what: &str, bytes: u64, available: Option<u64>) -> Result<(), String> {
    match available {
        Some(a) if bytes > a => Err(format!(
            "{what} would take {}, more than the {} this machine has available",
            human_bytes(bytes),
            human_bytes(a)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_accept_their_bounds_and_refuse_one_past() {
        for l in [PERFTEST_SIZE, PERFTEST_ITERS, DEMO_LINK_MTU, PINGPONG_SIZE, PINGPONG_RX_DEPTH, SOAK_MAX_SIZE] {
            assert_eq!(l.check(l.min), Ok(l.min));
            assert_eq!(l.check(l.max), Ok(l.max));
            assert!(l.check(l.max + 1).is_err());
            if l.min > 0 {
                assert!(l.check(l.min - 1).is_err());
            }
        }
        assert_eq!(
            PERFTEST_SIZE.check(99_999_999_999).unwrap_err(),
            "the message size must be between 1 and 2147483647 bytes (perftest's -s range)"
        );
    }

    #[test]
    fn the_parser_refuses_junk_and_out_of_range() {
        let p = PERFTEST_SIZE.parser();
        assert_eq!(p("65536"), Ok(65536));
        assert!(p("0").unwrap_err().contains("between 1 and 2147483647"));
        assert!(p("-1").unwrap_err().contains("not a non-negative integer"));
        assert!(p("99999999999999999999999").unwrap_err().contains("not a non-negative integer"));
    }

    #[test]
    fn memory_check() {
        assert!(fits_in("x", 10, Some(10)).is_ok());
        assert!(fits_in("x", 10, None).is_ok());
        assert_eq!(
            fits_in("the buffers", 3 << 30, Some(1 << 30)).unwrap_err(),
            "the buffers would take 3.0 GiB, more than the 1.0 GiB this machine has available"
        );
    }
}

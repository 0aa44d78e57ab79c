//! The soak: random WRs of every operation and size over lossy, reordering, duplicating and
//! corrupting links; every completion exactly once and in order, every byte checked.

use uroce_transport::sim::soak::{run, SoakConfig};
use uroce_transport::Mtu;

fn soak(cfg: SoakConfig) {
    let r = run(&cfg);
    eprintln!("{cfg:?}\n{}", r.summary());
    assert!(r.passed(), "{}\n{:#?}", r.summary(), r.errors);
    assert_eq!(r.ops, cfg.ops);
}

#[test]
fn clean_link_every_mtu() {
    for mtu in [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096] {
        let r = run(&SoakConfig { ops: 1_000, mtu, max_size: 16 * 1024, ..Default::default() });
        assert!(r.passed(), "{mtu:?}: {}\n{:#?}", r.summary(), r.errors);
        // A clean link never retransmits.
        assert_eq!((r.retransmits, r.naks), (0, 0), "{mtu:?}");
    }
}

#[test]
fn lossy_reordering_duplicating_corrupting() {
    let cfg =
        SoakConfig { ops: 10_000, loss: 0.05, reorder: 0.05, dup: 0.05, corrupt: 0.01, qps: 3, ..Default::default() };
    let r = run(&cfg);
    assert!(r.passed(), "{}\n{:#?}", r.summary(), r.errors);
    // The faults really happened and Go-Back-N really worked.
    assert!(r.retransmits > 1_000 && r.naks > 100, "{}", r.summary());
    assert!(r.wire.lost > 0 && r.wire.duplicated > 0 && r.wire.corrupted > 0 && r.wire.reordered > 0);
    // Corrupted frames were dropped on their ICRC (or earlier); a corrupted frame may also have
    // been duplicated.
    let dropped: u64 = r.counters.iter().map(|c| c.icrc_err + c.malformed_pkts).sum();
    assert!(dropped > 0 && dropped <= r.wire.corrupted + r.wire.duplicated, "{dropped} dropped: {:?}", r.wire);
}

#[test]
fn ipv6_and_4096_mtu_under_loss() {
    soak(SoakConfig {
        ops: 3_000,
        loss: 0.02,
        reorder: 0.02,
        mtu: Mtu::Mtu4096,
        ipv6: true,
        max_size: 256 * 1024,
        ..Default::default()
    });
}

#[test]
fn twenty_percent_loss_still_completes() {
    soak(SoakConfig { ops: 2_000, loss: 0.2, qps: 2, ..Default::default() });
}

/// The full-size soak (100,000 WRs at 5 % loss with reordering, duplication and corruption).
/// `cargo test --release -p uroce-transport --test soak -- --ignored`; also `uroce sim soak`.
#[test]
#[ignore]
fn hundred_thousand_ops() {
    soak(SoakConfig {
        ops: 100_000,
        loss: 0.05,
        reorder: 0.05,
        dup: 0.05,
        corrupt: 0.01,
        qps: 4,
        ..Default::default()
    });
}

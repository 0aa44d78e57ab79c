//! Attach/detach through bpf links on a veth pair and on `lo` inside a private network
//! namespace, observed with `ip link` from outside. Needs root; skipped (or failed with
//! `CI=1`) otherwise.

mod common;

use common::*;
use uroce_xdp_prog::{channels, ifindex, mtu, AttachMode, AttachedMode, Error, ProgramConfig, XdpProgram, XdpSteering};

fn xdp_state(ns: &Netns, dev: &str) -> &'static str {
    let out = ip_output(&["-n", &ns.name, "-d", "link", "show", "dev", dev]);
    if out.contains("xdpgeneric") {
        "generic"
    } else if out.contains(" xdp ") || out.contains("xdp/id") || out.contains("prog/xdp") {
        "native"
    } else {
        "none"
    }
}

#[test]
fn attach_modes_and_detach_on_drop() {
    if !privileged("attach_modes_and_detach_on_drop") {
        return;
    }
    let ns = Netns::new("a");
    ip(&["-n", &ns.name, "link", "add", "vx0", "type", "veth", "peer", "name", "vx1"]);
    ip(&["-n", &ns.name, "link", "set", "vx0", "up"]);
    ip(&["-n", &ns.name, "link", "set", "vx1", "up"]);

    // Interface queries in the namespace.
    let (ch, m, idx) = ns.run(|| (channels("vx0"), mtu("vx0"), ifindex("nope0")));
    let ch = ch.expect("ETHTOOL_GCHANNELS on veth");
    assert_eq!(ch.rx_queues(), 1, "{ch:?}");
    assert!(ch.max_rx_queues() >= 1);
    assert_eq!(m.unwrap(), 1500);
    assert_eq!(idx.unwrap_err(), Error::NoSuchInterface { name: "nope0".into() });

    // Native on veth (Auto picks native), then detached by dropping the attachment.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<AttachedMode>();
    let name = ns.name.clone();
    let holder = std::thread::spawn(move || {
        run_in(&name, move || {
            let p = XdpProgram::load(&ProgramConfig::default(), 2).unwrap();
            let a = p.attach(ifindex("vx0").unwrap(), AttachMode::Auto).unwrap();
            done_tx.send(a.mode()).unwrap();
            rx.recv().unwrap();
            drop(a);
        })
    });
    assert_eq!(done_rx.recv().unwrap(), AttachedMode::Native);
    assert_eq!(xdp_state(&ns, "vx0"), "native");
    tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(xdp_state(&ns, "vx0"), "none", "dropping the link detaches");

    // Generic explicitly; a second program on the same interface is refused while linked.
    ns.run(|| {
        let p = XdpProgram::load(&ProgramConfig::default(), 1).unwrap();
        let a = p.attach(ifindex("vx1").unwrap(), AttachMode::Generic).unwrap();
        assert_eq!(a.mode(), AttachedMode::Generic);
        let again = p.attach(ifindex("vx1").unwrap(), AttachMode::Generic);
        assert!(matches!(again, Err(Error::Attach { generic: Some(_), .. })), "{again:?}");
        a
    });
    // The attachment was returned from the thread and dropped at the end of `run`'s
    // statement: nothing may be left.
    assert_eq!(xdp_state(&ns, "vx1"), "none");

    // `lo` has no driver XDP: Auto falls back to generic, Native alone fails.
    ns.run(|| {
        let s = XdpSteering::install("lo", &ProgramConfig::default(), AttachMode::Auto).unwrap();
        assert_eq!(s.attachment().mode(), AttachedMode::Generic);
        let p = XdpProgram::load(&ProgramConfig::default(), 1).unwrap();
        let e = p.attach(ifindex("lo").unwrap(), AttachMode::Native).unwrap_err();
        assert!(matches!(e, Error::Attach { native: Some(_), generic: None, .. }), "{e:?}");
    });
}

#[test]
fn large_mtu_needs_frags_in_native_mode() {
    if !privileged("large_mtu_needs_frags_in_native_mode") {
        return;
    }
    let ns = Netns::new("m");
    ip(&["-n", &ns.name, "link", "add", "vm0", "mtu", "9000", "type", "veth", "peer", "name", "vm1", "mtu", "9000"]);
    ip(&["-n", &ns.name, "link", "set", "vm0", "up"]);
    ip(&["-n", &ns.name, "link", "set", "vm1", "up"]);
    ns.run(|| {
        let idx = ifindex("vm0").unwrap();
        let plain = XdpProgram::load(&ProgramConfig::default(), 1).unwrap();
        let e = plain.attach(idx, AttachMode::Native).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ERANGE), "{e}");
        let frags = XdpProgram::load(&ProgramConfig { frags: true, ..ProgramConfig::default() }, 1).unwrap();
        let a = frags.attach(idx, AttachMode::Native).unwrap();
        assert_eq!(a.mode(), AttachedMode::Native);
        drop(a);
        // install() turns frags on by itself from the MTU.
        let s = XdpSteering::install("vm0", &ProgramConfig::default(), AttachMode::Native).unwrap();
        assert!(s.program().config().frags);
    });
}

//! Topologies: dumbbell, N:1 incast, two-tier leaf-spine, and a ring of switches.
//!
//! Every builder wires the fabric, fills the switches' forwarding tables (shortest paths;
//! ECMP over a leaf's uplinks) and returns where the interesting queues are.

use crate::fabric::{host_mac, Fabric, HostConfig, LinkSpec};
use crate::switch::SwitchConfig;

/// A built topology.
pub struct Topology {
    /// The fabric.
    pub fabric: Fabric,
    /// The switch ports whose egress queue is the bottleneck (or the ones to watch).
    pub watch: Vec<(u32, u16)>,
    /// Each host's switch and that switch's port to it.
    pub host_ports: Vec<(u32, u16)>,
    /// Each switch's name ("leaf0", "spine1", "ring2", ...), by node id.
    pub names: Vec<(u32, String)>,
}

impl Topology {
    /// The name of node `n` ("host7" for a host).
    pub fn name(&self, n: u32) -> String {
        match self.names.iter().find(|(id, _)| *id == n) {
            Some((_, s)) => s.clone(),
            None => "host".into(),
        }
    }
}

/// `n` senders on one switch, `n` receivers on another, one link between the switches (the
/// bottleneck, `bottleneck` fast). Hosts 0..n send, n..2n receive.
pub fn dumbbell(
    seed: u64,
    n: usize,
    host: HostConfig,
    sw: SwitchConfig,
    edge: LinkSpec,
    bottleneck: LinkSpec,
) -> Topology {
    let mut f = Fabric::new(seed);
    let (l, r) = (f.add_switch(sw, n + 1), f.add_switch(sw, n + 1));
    let (lb, rb) = f.connect(l, r, bottleneck);
    let mut host_ports = Vec::new();
    for side in [l, r] {
        for _ in 0..n {
            let h = f.add_host(host);
            let (_, sp) = f.connect(f.host_node(h), side, edge);
            f.route(side, host_mac(h as u32), vec![sp]);
            let other = if side == l { r } else { l };
            f.route(other, host_mac(h as u32), vec![if other == l { lb } else { rb }]);
            host_ports.push((side, sp));
        }
    }
    let names = vec![(l, "left".into()), (r, "right".into())];
    Topology { fabric: f, watch: vec![(l, lb), (r, rb)], host_ports, names }
}

/// `n` senders and one receiver on one switch: hosts 0..n send, host `n` receives; the
/// receiver's port is the bottleneck.
pub fn incast(seed: u64, n: usize, host: HostConfig, sw: SwitchConfig, link: LinkSpec) -> Topology {
    let mut f = Fabric::new(seed);
    let s = f.add_switch(sw, n + 1);
    let mut watch = Vec::new();
    let mut host_ports = Vec::new();
    for i in 0..=n {
        let h = f.add_host(host);
        let (_, sp) = f.connect(f.host_node(h), s, link);
        f.route(s, host_mac(h as u32), vec![sp]);
        host_ports.push((s, sp));
        if i == n {
            watch.push((s, sp));
        }
    }
    Topology { fabric: f, watch, host_ports, names: vec![(s, "switch".into())] }
}

/// The shape of a leaf-spine fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafSpine {
    /// Leaf switches.
    pub leaves: usize,
    /// Hosts per leaf.
    pub per_leaf: usize,
    /// Spine switches.
    pub spines: usize,
}

/// `leaves` leaf switches with `per_leaf` hosts each, every leaf joined to each of `spines`
/// spine switches; host `h` is on leaf `h / per_leaf`. Leaves spread traffic for other leaves
/// over their uplinks by flow hash. Watches every spine-to-leaf port.
pub fn leaf_spine(
    seed: u64,
    shape: LeafSpine,
    host: HostConfig,
    sw: SwitchConfig,
    edge: LinkSpec,
    core: LinkSpec,
) -> Topology {
    let LeafSpine { leaves, per_leaf, spines } = shape;
    let mut f = Fabric::new(seed);
    let leaf: Vec<u32> = (0..leaves).map(|_| f.add_switch(sw, per_leaf + spines)).collect();
    let spine: Vec<u32> = (0..spines).map(|_| f.add_switch(sw, leaves)).collect();
    // up[l][s]: leaf l's port to spine s; down[s][l]: spine s's port to leaf l.
    let mut up = vec![vec![0u16; spines]; leaves];
    let mut down = vec![vec![0u16; leaves]; spines];
    for (li, &l) in leaf.iter().enumerate() {
        for (si, &s) in spine.iter().enumerate() {
            let (a, b) = f.connect(l, s, core);
            up[li][si] = a;
            down[si][li] = b;
        }
    }
    let mut host_ports = Vec::new();
    for (li, &l) in leaf.iter().enumerate() {
        for _ in 0..per_leaf {
            let h = f.add_host(host);
            let (_, p) = f.connect(f.host_node(h), l, edge);
            host_ports.push((l, p));
            let mac = host_mac(h as u32);
            f.route(l, mac, vec![p]);
            for (lj, &other) in leaf.iter().enumerate() {
                if lj != li {
                    f.route(other, mac, up[lj].clone());
                }
            }
            for (si, &s) in spine.iter().enumerate() {
                f.route(s, mac, vec![down[si][li]]);
            }
        }
    }
    let watch = spine.iter().enumerate().flat_map(|(si, &s)| down[si].iter().map(move |&p| (s, p))).collect();
    let mut names: Vec<(u32, String)> = leaf.iter().enumerate().map(|(i, &n)| (n, format!("leaf{i}"))).collect();
    names.extend(spine.iter().enumerate().map(|(i, &n)| (n, format!("spine{i}"))));
    Topology { fabric: f, watch, host_ports, names }
}

/// `k` switches in a ring, one host on each; every switch forwards clockwise to hosts that
/// are not its own, so flows from host `i` to host `i + 2` (and so on) make each link's queue
/// wait on the next: the cyclic buffer dependency that lets PFC deadlock. Watches every
/// ring port (switch `i`'s port toward `i + 1`).
pub fn ring(seed: u64, k: usize, host: HostConfig, sw: SwitchConfig, link: LinkSpec) -> Topology {
    let mut f = Fabric::new(seed);
    let sws: Vec<u32> = (0..k).map(|_| f.add_switch(sw, 3)).collect();
    let mut cw = vec![0u16; k];
    for i in 0..k {
        let (a, _) = f.connect(sws[i], sws[(i + 1) % k], link);
        cw[i] = a;
    }
    let mut host_ports = Vec::new();
    for i in 0..k {
        let h = f.add_host(host);
        let (_, p) = f.connect(f.host_node(h), sws[i], link);
        host_ports.push((sws[i], p));
        let mac = host_mac(h as u32);
        for j in 0..k {
            f.route(sws[j], mac, vec![if j == i { p } else { cw[j] }]);
        }
    }
    let watch = (0..k).map(|i| (sws[i], cw[i])).collect();
    let names = sws.iter().enumerate().map(|(i, &n)| (n, format!("ring{i}"))).collect();
    Topology { fabric: f, watch, host_ports, names }
}

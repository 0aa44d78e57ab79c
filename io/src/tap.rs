//! A program on a port's path in both directions, between the engine and the wire: it sees
//! every frame the engine sends before it reaches the backend and every frame the backend
//! delivers before it reaches the engine, and decides what goes on — nothing, the frame, a
//! changed frame, several frames, frames of its own. `uroce probe` places its targeted faults
//! this way (drop the k-th packet of the m-th message, the ACK of a message, mark CE, reorder),
//! the way Lumina's switch does, but in software on any link.
//!
//! A port with a tap captures the wire (`--pcap`): what the tap lets out and what arrives
//! before the tap sees it.

use uroce_transport::Instant;

/// What sits between a [`crate::runtime::Port`]'s engine and its backend; see the module docs.
pub trait Tap: Send {
    /// The engine sent `frame` at `now`: hand what goes on the wire to `wire` (any number of
    /// frames, now; later ones from [`Tap::poll`]).
    fn on_tx(&mut self, now: Instant, frame: &[u8], wire: &mut dyn FnMut(&[u8]));

    /// `frame` arrived from the wire at `now`: hand what the engine receives to `engine`.
    fn on_rx(&mut self, now: Instant, frame: &[u8], engine: &mut dyn FnMut(&[u8]));

    /// Called every port round: frames the tap holds or makes up that are due now.
    fn poll(&mut self, _now: Instant, _wire: &mut dyn FnMut(&[u8]), _engine: &mut dyn FnMut(&[u8])) {}

    /// When [`Tap::poll`] next has something to do (the port does not sleep past it).
    fn next_wake(&self) -> Option<Instant> {
        None
    }
}

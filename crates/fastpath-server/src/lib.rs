//! The daemon's side of the fast path (`shoal run`): processes connect over a Unix socket
//! and ask for file operations, served from the engine with the kernel's permission rules,
//! without a FUSE round trip. What the kernel mount has cached is told of every change
//! ([`KernelCache`]), so both doors show one filesystem.
//!
//! Layers: `walk` resolves paths (from a start the process holds: `starts`), `permission` checks access, `ops` holds one function per
//! request, `handles` the open files of each process, `server` the socket and threads.

mod activity;
mod answered_early;
mod below;
mod credentials;
mod handles;
mod held_change;
mod ops;
mod pages;
mod permission;
mod placement;
mod refusal;
mod server;
mod starts;
mod stats;
mod walk;
mod walk_cache;

pub use refusal::Why;
pub use server::{start, Access, FastPathHandle, KernelCache};
pub use stats::{FastPathStats, KindCounts, REQUEST_KINDS};

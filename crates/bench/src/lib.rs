//! Workload generators and tree comparison for shoal's tests and benchmarks.
//!
//! - [`tree`]: a deterministic, kernel-source-like directory tree (same seed, same bytes).
//! - [`manifest`]: a canonical description of a tree, to compare two trees exactly.

pub mod manifest;
mod rng;
mod sys;
pub mod tree;

pub use manifest::{diff_manifests, manifest, Entry, FileKind};
pub use rng::SplitMix64;
pub use tree::{generate, TreeSpec, TreeSummary};

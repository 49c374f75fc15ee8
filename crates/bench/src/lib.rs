//! shoal's benchmark library: workload generators, the metadata workloads of the field
//! (fs_mark-style create / stat / unlink, rm -rf, a source tree through tar / cp / find /
//! du / rm, the Swift object pattern, bonnie++'s file tests, quotacheck), run side by side
//! on any directories, with statistics, JSON, Markdown and SVG charts.
//!
//! - [`tree`]: a deterministic, kernel-source-like directory tree (same seed, same bytes).
//! - [`manifest`]: a canonical description of a tree, to compare two trees exactly.
//! - [`workload`], [`runner`], [`target`], [`report`], [`chart`]: `shoal bench`.
//! - [`worker`]: the samples of a target measured under the fast path library.

pub mod chart;
pub mod cpu;
pub mod env;
pub mod error;
pub mod external;
pub mod interrupt;
pub mod manifest;
pub mod mounts;
pub mod progress;
pub mod report;
mod rng;
pub mod runner;
pub mod stats;
pub mod target;
pub mod tools;
pub mod tree;
pub mod worker;
pub mod workload;

pub use error::{BenchError, Result};
pub use manifest::{diff_manifests, manifest, Entry, FileKind};
pub use rng::SplitMix64;
pub use tree::{generate, TreeSpec, TreeSummary};

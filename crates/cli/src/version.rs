//! `shoal --version`: the crate version and the git commit it was built from (build.rs).

pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SHOAL_GIT_COMMIT"),
    ")"
);

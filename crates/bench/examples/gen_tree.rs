//! Writes a generated tree: `gen_tree DIR [FILES] [SEED]` (defaults: the medium tree).
use shoal_bench::{generate, TreeSpec};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1) else {
        eprintln!("usage: gen_tree DIR [FILES] [SEED]");
        std::process::exit(2);
    };
    let files = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(TreeSpec::medium().files);
    let seed = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let summary = generate(
        std::path::Path::new(dir),
        &TreeSpec::with_files(files, seed),
    )?;
    println!("{summary:?}");
    Ok(())
}

//! The one syntax for sizes and durations, on the command line and in `-o` options, and
//! their human-readable rendering (`-h`).
//!
//! Sizes: a whole number with an optional binary suffix `K`, `M`, `G`, `T` (case-insensitive,
//! optionally followed by `B` or `iB`): `256M` = 256 MiB, `1G` = 1 GiB. A plain number is
//! bytes, in every option of every command (`--bhard 512`, `-o cache=268435456`).
//!
//! Durations: a whole number with an optional suffix `s`, `m`, `h`, `d`; a plain number is
//! seconds (`90`, `90s`, `15m`, `2h`, `7d`).

/// Shown in help texts and errors.
pub const SIZE_SYNTAX: &str = "bytes, or a number with a K, M, G or T suffix (binary: 256M, 1G)";
pub const DURATION_SYNTAX: &str = "seconds, or a number with s, m, h or d (e.g. 90, 15m, 7d)";

/// A size in bytes; see the module documentation for the syntax.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let without_b = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match without_b.chars().last() {
        Some('k') => (&without_b[..without_b.len() - 1], 10),
        Some('m') => (&without_b[..without_b.len() - 1], 20),
        Some('g') => (&without_b[..without_b.len() - 1], 30),
        Some('t') => (&without_b[..without_b.len() - 1], 40),
        _ => (without_b, 0),
    };
    let count: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size ({SIZE_SYNTAX})"))?;
    count
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A duration in seconds; see the module documentation for the syntax.
pub fn parse_duration_secs(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (digits, unit) = match trimmed.chars().last() {
        Some('s') => (&trimmed[..trimmed.len() - 1], 1),
        Some('m') => (&trimmed[..trimmed.len() - 1], 60),
        Some('h') => (&trimmed[..trimmed.len() - 1], 3600),
        Some('d') => (&trimmed[..trimmed.len() - 1], 86_400),
        _ => (trimmed, 1),
    };
    let count: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration ({DURATION_SYNTAX})"))?;
    count
        .checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// `1536` -> `1.5K`, `268435456` -> `256M`: binary units, at most one decimal, as `df -h`.
pub fn human_bytes(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut value = bytes as f64;
    let mut index = 0;
    while value >= 1024.0 && index + 1 < SUFFIXES.len() {
        value /= 1024.0;
        index += 1;
    }
    if index == 0 {
        format!("{bytes}")
    } else if value < 10.0 && value.fract() >= 0.05 {
        format!("{value:.1}{}", SUFFIXES[index])
    } else {
        format!("{}{}", value.round() as u64, SUFFIXES[index])
    }
}

/// `1500000` -> `1.5M`: decimal units for counts (inodes).
pub fn human_count(count: u64) -> String {
    const SUFFIXES: [&str; 5] = ["", "k", "M", "G", "T"];
    let mut value = count as f64;
    let mut index = 0;
    while value >= 1000.0 && index + 1 < SUFFIXES.len() {
        value /= 1000.0;
        index += 1;
    }
    if index == 0 {
        format!("{count}")
    } else if value < 10.0 && value.fract() >= 0.05 {
        format!("{value:.1}{}", SUFFIXES[index])
    } else {
        format!("{}{}", value.round() as u64, SUFFIXES[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes_and_a_plain_number_is_bytes() {
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("10k"), Ok(10 << 10));
        assert_eq!(parse_size("5M"), Ok(5 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("256"), Ok(256));
        assert_eq!(parse_size("4096k"), Ok(4 << 20));
        assert_eq!(parse_size("1048576b"), Ok(1 << 20));
        for bad in [
            "-1",
            "ten",
            "",
            "M",
            "1.5g",
            "99999999999999999999",
            "16777216t",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_take_s_m_h_d() {
        assert_eq!(parse_duration_secs("7d"), Ok(604_800));
        assert_eq!(parse_duration_secs("90"), Ok(90));
        assert_eq!(parse_duration_secs("90s"), Ok(90));
        assert_eq!(parse_duration_secs("15m"), Ok(900));
        assert_eq!(parse_duration_secs("2h"), Ok(7200));
        for bad in ["soon", "", "1.5h", "-1", "h"] {
            assert!(parse_duration_secs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn human_output_rounds_like_df() {
        assert_eq!(human_bytes(0), "0");
        assert_eq!(human_bytes(1023), "1023");
        assert_eq!(human_bytes(1536), "1.5K");
        assert_eq!(human_bytes(256 << 20), "256M");
        assert_eq!(human_bytes(3 << 30), "3G");
        assert_eq!(human_count(999), "999");
        assert_eq!(human_count(1_500_000), "1.5M");
        assert_eq!(human_count(20_000), "20k");
    }
}

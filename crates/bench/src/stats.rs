//! Summary statistics of repeated samples: median, min, max, and ratios between targets.

use serde::{Deserialize, Serialize};

/// Median, min and max of one metric on one target over the runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: usize,
}

/// None for no samples. Non-finite values are dropped: a failed sample must not turn the
/// median into NaN.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Summary {
        median,
        min: sorted[0],
        max: sorted[n - 1],
        samples: n,
    })
}

/// `value / baseline`, or None when the baseline is zero or either side is not finite.
pub fn ratio(value: f64, baseline: f64) -> Option<f64> {
    if baseline == 0.0 || !baseline.is_finite() || !value.is_finite() {
        return None;
    }
    Some(value / baseline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_count_takes_the_middle() {
        let s = summarize(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.samples), (3.0, 1.0, 5.0, 3));
    }

    #[test]
    fn even_count_averages_the_middle_two() {
        let s = summarize(&[4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 10.0));
    }

    #[test]
    fn single_and_empty() {
        let s = summarize(&[7.5]).unwrap();
        assert_eq!((s.median, s.min, s.max), (7.5, 7.5, 7.5));
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN]), None);
    }

    #[test]
    fn non_finite_samples_are_ignored() {
        let s = summarize(&[f64::NAN, 2.0, f64::INFINITY, 4.0]).unwrap();
        assert_eq!((s.median, s.samples), (3.0, 2));
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(50.0, 100.0), Some(0.5));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
    }
}

//! One definition per metric: its name in the JSON report, its name and type in the
//! Prometheus exposition, its help text and unit, and how to read its value. Each metrics
//! struct has one table of these (`store::STORE_METRICS`, and the daemon's in the CLI), and
//! every rendering (`shoal stats --json`, `-o metrics=`, docs/monitoring.md's glossary test)
//! reads the table, so a metric cannot be named, described or dropped in one place only.

/// Prometheus metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (until the daemon restarts).
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// Unit of the recorded value; Prometheus wants seconds for time, so time units convert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Count,
    Bytes,
    Nanoseconds,
    Microseconds,
}

impl Unit {
    /// The value in the exposition's base unit: seconds for time, else as recorded (an
    /// integer, exact however large).
    pub fn base_value(self, value: u64) -> String {
        match self {
            Unit::Count | Unit::Bytes => value.to_string(),
            Unit::Nanoseconds => (value as f64 / 1e9).to_string(),
            Unit::Microseconds => (value as f64 / 1e6).to_string(),
        }
    }
}

/// One metric of the struct `T`.
pub struct Metric<T> {
    /// The field's name in `T` and so in the JSON report (serde's field names).
    pub field: &'static str,
    /// The Prometheus name; `None`: JSON and screen only (a maximum, a per-mount figure
    /// derived from others, or one read on request).
    pub prometheus: Option<&'static str>,
    pub kind: Kind,
    pub unit: Unit,
    /// One sentence: the Prometheus HELP line and docs/monitoring.md's glossary entry.
    pub help: &'static str,
    pub read: fn(&T) -> u64,
}

/// A metric the Prometheus endpoint serves (the table entries' usual form).
pub const fn exposed<T>(
    field: &'static str,
    prometheus: &'static str,
    kind: Kind,
    unit: Unit,
    help: &'static str,
    read: fn(&T) -> u64,
) -> Metric<T> {
    Metric {
        field,
        prometheus: Some(prometheus),
        kind,
        unit,
        help,
        read,
    }
}

impl<T> Metric<T> {
    /// The value as the exposition prints it.
    pub fn exposed_value(&self, of: &T) -> String {
        self.unit.base_value((self.read)(of))
    }
}

/// Checks a table against its struct, for tests: `fields` are the struct's numeric fields
/// (its JSON keys, optional ones aside) and `numbered` holds the value i + 1 in `fields[i]`.
/// Fails unless the table names each field exactly once and each `read` reads its own field.
pub fn check_table<T>(table: &[Metric<T>], fields: &[String], numbered: &T) -> Result<(), String> {
    let named: Vec<&str> = table.iter().map(|metric| metric.field).collect();
    for field in fields {
        if named.iter().filter(|name| **name == field.as_str()).count() != 1 {
            return Err(format!("field {field} is not in the table exactly once"));
        }
    }
    if named.len() != fields.len() {
        return Err(format!(
            "the table names {named:?}, the struct has {fields:?}"
        ));
    }
    for metric in table {
        let index = fields
            .iter()
            .position(|field| field == metric.field)
            .ok_or_else(|| format!("{} is no field", metric.field))?;
        if (metric.read)(numbered) != index as u64 + 1 {
            return Err(format!(
                "the table reads {} from another field",
                metric.field
            ));
        }
    }
    let mut prometheus: Vec<&str> = table
        .iter()
        .filter_map(|metric| metric.prometheus)
        .collect();
    prometheus.sort_unstable();
    if prometheus.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(format!("a Prometheus name twice in {prometheus:?}"));
    }
    Ok(())
}

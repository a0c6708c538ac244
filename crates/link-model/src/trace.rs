//! Mahimahi delivery traces: one millisecond timestamp per line, each a chance to deliver one
//! 1500-byte packet; repeated timestamps mean several chances in that millisecond; the trace
//! loops with a period equal to its last timestamp.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ModelError;

/// Bytes one delivery opportunity carries (Mahimahi's MTU-sized opportunity).
pub const OPPORTUNITY_BYTES: u64 = 1500;

#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Where it was read from (for messages and reports).
    pub source: String,
    /// Non-decreasing millisecond timestamps.
    pub timestamps_ms: Arc<[u64]>,
    /// The loop period in milliseconds (the last timestamp, at least 1).
    pub period_ms: u64,
}

impl Trace {
    pub fn load(path: &Path) -> Result<Trace, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
            path: PathBuf::from(path),
            message: e.to_string(),
        })?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// Parses trace text; errors name `source` and the 1-based line.
    pub fn parse(text: &str, source: &str) -> Result<Trace, ModelError> {
        let bad = |line: usize, message: String| ModelError::Trace {
            file: source.to_string(),
            line,
            message,
        };
        let mut ts = Vec::new();
        let mut last = 0u64;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let v: u64 = line.parse().map_err(|_| {
                bad(
                    i + 1,
                    format!(
                        "expected a non-negative integer millisecond timestamp, found {line:?}"
                    ),
                )
            })?;
            if v < last {
                return Err(bad(
                    i + 1,
                    format!("timestamps must not decrease ({v} after {last})"),
                ));
            }
            last = v;
            ts.push(v);
        }
        if ts.is_empty() {
            return Err(bad(1, "the trace has no timestamps (empty file)".into()));
        }
        Ok(Trace {
            source: source.to_string(),
            period_ms: last.max(1),
            timestamps_ms: ts.into(),
        })
    }

    /// The trace's own mean rate in kbit/s over one period.
    pub fn mean_kbps(&self) -> f64 {
        self.timestamps_ms.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0 / self.period_ms as f64
    }

    /// Bytes the trace offers in the unscaled window [from_ms, to_ms), following the loop
    /// (cycle c's opportunities sit at c × period + timestamp, as in Mahimahi).
    pub fn bytes_between(&self, from_ms: u64, to_ms: u64) -> u64 {
        (self.opportunities_before(to_ms) - self.opportunities_before(from_ms.min(to_ms)))
            * OPPORTUNITY_BYTES
    }

    /// Number of opportunities whose time is < `t_ms`.
    fn opportunities_before(&self, t_ms: u64) -> u64 {
        let p = self.period_ms;
        let n = self.timestamps_ms.len() as u64;
        // Cycles lying wholly before t (all timestamps ≤ p < t − c·p).
        let full = if t_ms > p { (t_ms - p).div_ceil(p) } else { 0 };
        let mut count = full * n;
        let mut c = full;
        while c * p < t_ms {
            let rel = t_ms - c * p;
            count += self.timestamps_ms.partition_point(|&x| x < rel) as u64;
            c += 1;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_computes_rate() {
        let t = Trace::parse("1\n1\n2\n\n4\n", "t").unwrap();
        assert_eq!(&*t.timestamps_ms, &[1, 1, 2, 4]);
        assert_eq!(t.period_ms, 4);
        assert!((t.mean_kbps() - 4.0 * 1500.0 * 8.0 / 4.0).abs() < 1e-9);
    }

    #[test]
    fn rejects_bad_lines_with_line_numbers() {
        let e = Trace::parse("1\n2\nabc\n", "f.down")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.down") && e.contains("line 3"), "{e}");
        let e = Trace::parse("5\n3\n", "f.down").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("decrease"), "{e}");
        let e = Trace::parse("\n\n", "empty.up").unwrap_err().to_string();
        assert!(e.contains("empty.up") && e.contains("empty"), "{e}");
        assert!(Trace::parse("-3\n", "neg").is_err());
    }

    #[test]
    fn bytes_between_follows_the_loop() {
        // period 10: opportunities at 0, 5, 10 | 10, 15, 20 | 20, 25, 30 ...
        let t = Trace::parse("0\n5\n10\n", "t").unwrap();
        assert_eq!(t.bytes_between(0, 10), 2 * 1500);
        assert_eq!(t.bytes_between(0, 30), 8 * 1500);
        assert_eq!(t.bytes_between(0, 31), 10 * 1500);
        assert_eq!(t.bytes_between(3, 6), 1500);
    }
}

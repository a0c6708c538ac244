//! Protocol versions and their negotiation in the `Hello` frames.

/// The version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The versions this crate speaks, best first (what a `Hello` offers).
pub const SUPPORTED_VERSIONS: &[u32] = &[PROTOCOL_VERSION];

/// The two sides have no version in common. Its message names both lists, so that an operator
/// reading the log of either side sees what to upgrade.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no protocol version in common: we speak {}, the peer speaks {}",
    list(ours),
    list(theirs)
)]
pub struct VersionMismatch {
    pub ours: Vec<u32>,
    pub theirs: Vec<u32>,
}

impl VersionMismatch {
    /// The `ERROR` frame to send on the control stream before closing the connection with
    /// the same code: `VERSION_MISMATCH`, the reason naming both lists.
    pub fn to_frame(&self) -> crate::Frame {
        crate::Frame::Error {
            code: crate::code::VERSION_MISMATCH,
            reason: self.to_string(),
        }
    }
}

fn list(versions: &[u32]) -> String {
    if versions.is_empty() {
        return "none".to_string();
    }
    let v: Vec<String> = versions.iter().map(|v| v.to_string()).collect();
    v.join(", ")
}

/// The highest version in both lists (each side computes the same answer from the two
/// `Hello`s, so no further round trip is needed).
pub fn negotiate(ours: &[u32], theirs: &[u32]) -> Result<u32, VersionMismatch> {
    ours.iter()
        .copied()
        .filter(|v| theirs.contains(v))
        .max()
        .ok_or_else(|| VersionMismatch {
            ours: ours.to_vec(),
            theirs: theirs.to_vec(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_common() {
        assert_eq!(negotiate(&[1, 2, 3], &[2, 3, 4]), Ok(3));
        assert_eq!(negotiate(&[1], &[1]), Ok(1));
        assert_eq!(negotiate(SUPPORTED_VERSIONS, &[7, 1]), Ok(1));
    }

    #[test]
    fn mismatch_names_both() {
        let e = negotiate(&[1], &[2, 3]).unwrap_err();
        let msg = e.to_string();
        assert_eq!(
            msg,
            "no protocol version in common: we speak 1, the peer speaks 2, 3"
        );
        let e = negotiate(&[1], &[]).unwrap_err();
        assert!(e.to_string().ends_with("the peer speaks none"), "{e}");
    }
}

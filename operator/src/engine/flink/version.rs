//! Which Flink versions the engine runs, and which savepoint formats each can read.
//!
//! Savepoints restore forward only: Flink 1.20 writes `_metadata` format 4 and reads 1–4, Flink
//! 2.3 writes 6 and reads 1–6 (measured with Flink's own jars; FLINK-ENGINE-NOTES). The
//! pre-check runs with the target version, so one checker build per supported minor ships with
//! the project (`flink/build.sh`).

use std::fmt;
use std::str::FromStr;

use super::FlinkError;

/// A Flink release, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlinkVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// One supported minor: its versions run, with the checker built against `checker_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupportedMinor {
    pub major: u32,
    pub minor: u32,
    /// The release whose jars the pre-check is compiled against and runs with.
    pub checker_version: FlinkVersion,
    /// The newest savepoint `_metadata` format this minor reads.
    pub max_format_version: u32,
}

/// The support matrix (docs/flink.md states the same).
pub const SUPPORTED: &[SupportedMinor] = &[
    SupportedMinor {
        major: 1,
        minor: 20,
        checker_version: FlinkVersion::new(1, 20, 0),
        max_format_version: 4,
    },
    SupportedMinor {
        major: 2,
        minor: 3,
        checker_version: FlinkVersion::new(2, 3, 0),
        max_format_version: 6,
    },
];

impl FlinkVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// The supported minor this version belongs to, or why it is refused.
    pub fn supported(&self) -> Result<&'static SupportedMinor, FlinkError> {
        SUPPORTED
            .iter()
            .find(|s| s.major == self.major && s.minor == self.minor)
            .ok_or_else(|| {
                FlinkError::Version(format!(
                    "Flink {self} is not supported: the Flink engine runs {} (the savepoint \
                     pre-check is built per minor version)",
                    supported_list()
                ))
            })
    }

    /// Whether this version can restore a savepoint of `format_version`; if not, why.
    pub fn check_format(&self, format_version: u32) -> Result<(), FlinkError> {
        let minor = self.supported()?;
        if format_version <= minor.max_format_version {
            Ok(())
        } else {
            Err(FlinkError::Version(format!(
                "savepoint format version {format_version} cannot be read by Flink {self} (it \
                 reads up to {}): the savepoint was written by a newer Flink, and savepoints \
                 restore forward only",
                minor.max_format_version
            )))
        }
    }
}

fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|s| format!("{}.{}.x", s.major, s.minor))
        .collect::<Vec<_>>()
        .join(" and ")
}

impl fmt::Display for FlinkVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for FlinkVersion {
    type Err = FlinkError;

    /// `1.20`, `1.20.0`, `2.3.0`; a suffix after `-` (`2.3.0-java17`, `1.20.0-SNAPSHOT`) is ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            FlinkError::Version(format!(
                "\"{s}\" is not a Flink version (expected major.minor[.patch], e.g. 1.20.0)"
            ))
        };
        let core = s.trim().split('-').next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut number = || -> Result<Option<u32>, FlinkError> {
            parts
                .next()
                .map(|p| p.parse::<u32>().map_err(|_| bad()))
                .transpose()
        };
        let major = number()?.ok_or_else(bad)?;
        let minor = number()?.ok_or_else(bad)?;
        let patch = number()?.unwrap_or(0);
        if number()?.is_some() {
            return Err(bad());
        }
        Ok(Self::new(major, minor, patch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_places_versions() {
        let v: FlinkVersion = "1.20.0".parse().unwrap();
        assert_eq!(v, FlinkVersion::new(1, 20, 0));
        assert_eq!(
            "2.3".parse::<FlinkVersion>().unwrap(),
            FlinkVersion::new(2, 3, 0)
        );
        assert_eq!(
            "2.3.1-java17".parse::<FlinkVersion>().unwrap(),
            FlinkVersion::new(2, 3, 1)
        );
        assert!("2".parse::<FlinkVersion>().is_err());
        assert!("1.x".parse::<FlinkVersion>().is_err());
        assert!("1.20.0.1".parse::<FlinkVersion>().is_err());
        assert!(FlinkVersion::new(1, 20, 3).supported().is_ok());
        let refused = FlinkVersion::new(1, 19, 1)
            .supported()
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("Flink 1.19.1 is not supported"),
            "{refused}"
        );
        assert!(refused.contains("1.20.x and 2.3.x"), "{refused}");
    }

    #[test]
    fn validation_admits_exactly_the_supported_minors() {
        let here: Vec<(u32, u32)> = SUPPORTED.iter().map(|s| (s.major, s.minor)).collect();
        assert_eq!(here, streamjob_crds::flink::SUPPORTED_MINORS);
    }

    #[test]
    fn savepoints_restore_forward_only() {
        let old = FlinkVersion::new(1, 20, 0);
        let new = FlinkVersion::new(2, 3, 0);
        assert!(old.check_format(4).is_ok());
        assert!(new.check_format(4).is_ok());
        assert!(new.check_format(6).is_ok());
        let down = old.check_format(6).unwrap_err().to_string();
        assert!(
            down.contains("format version 6 cannot be read by Flink 1.20.0"),
            "{down}"
        );
    }
}

//! Where a transition is: `status.upgrade.step`, written `Kind/Step` (`InPlace/Savepointing`).
//!
//! The stages are part of the API (tools read them, the CRD's schema lists them, so the API
//! server refuses a status naming another); which moves between them are legal is the operator's
//! state machine (`operator/src/decide/machine.rs`).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a transition does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Upgrade or rescale: stop the old version, start the new one.
    InPlace,
    /// Upgrade through a shadow copy started beside the old version.
    Shadow,
    /// Stop with a savepoint and keep nothing running.
    Suspend,
    /// Start a suspended job again.
    Resume,
    /// Return to the last stable spec from the upgrade's savepoint.
    Rollback,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::InPlace,
        Kind::Shadow,
        Kind::Suspend,
        Kind::Resume,
        Kind::Rollback,
    ];
}

/// Where a transition is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// A plan pod of the new image checks the new spec against the latest state.
    Planning,
    /// Terminal: the plan said the new spec cannot restore the state; the old job runs on.
    Blocked,
    /// Shadow: the new version's pod is started in standby beside the old one.
    StartingStandby,
    /// Stop-with-savepoint requested from the running job.
    Savepointing,
    /// The state to restore is recorded (`upgrade.savepoint`); old pods may go.
    Stopped,
    /// The new version restores and must complete its first checkpoint.
    Restoring,
    /// Terminal: the new version failed and the job runs the last stable spec again.
    RolledBack,
    /// Terminal: the upgrade was given up before anything was stopped; the old job runs on.
    Aborted,
    /// Terminal: the job is suspended; `upgrade.savepoint` is where it resumes from.
    Suspended,
}

impl Step {
    pub const ALL: [Step; 9] = [
        Step::Planning,
        Step::Blocked,
        Step::StartingStandby,
        Step::Savepointing,
        Step::Stopped,
        Step::Restoring,
        Step::RolledBack,
        Step::Aborted,
        Step::Suspended,
    ];

    /// Terminal steps are records, not work in flight.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Step::Blocked | Step::RolledBack | Step::Aborted | Step::Suspended
        )
    }
}

/// A point of the state machine, written to `status.upgrade.step` as `Kind/Step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stage {
    pub kind: Kind,
    pub step: Step,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.kind, self.step)
    }
}

impl FromStr for Stage {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, st) = s
            .split_once('/')
            .ok_or_else(|| format!("bad upgrade step {s:?}: expected Kind/Step"))?;
        let kind = Kind::ALL
            .into_iter()
            .find(|x| format!("{x:?}") == k)
            .ok_or_else(|| format!("bad upgrade kind {k:?}"))?;
        let step = Step::ALL
            .into_iter()
            .find(|x| format!("{x:?}") == st)
            .ok_or_else(|| format!("bad upgrade step {st:?}"))?;
        Ok(Stage { kind, step })
    }
}

impl Serialize for Stage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Stage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Stage {
    fn schema_name() -> Cow<'static, str> {
        "Stage".into()
    }

    fn inline_schema() -> bool {
        true
    }

    /// A string naming one of the stages, so the API server refuses any other.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let all: Vec<String> = Kind::ALL
            .into_iter()
            .flat_map(|kind| Step::ALL.map(|step| Stage { kind, step }.to_string()))
            .collect();
        json_schema!({
            "description": "Current stage of the transition, `Kind/Step` (docs/upgrades.md).",
            "type": "string",
            "enum": all,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_stage_reads_back_as_written() {
        for kind in Kind::ALL {
            for step in Step::ALL {
                let stage = Stage { kind, step };
                let json = serde_json::to_string(&stage).unwrap();
                assert_eq!(serde_json::from_str::<Stage>(&json).unwrap(), stage);
            }
        }
        assert_eq!(
            serde_json::to_value(Stage {
                kind: Kind::InPlace,
                step: Step::Savepointing
            })
            .unwrap(),
            "InPlace/Savepointing"
        );
        let e = serde_json::from_str::<Stage>("\"InPlace/Sleeping\"").unwrap_err();
        assert!(
            e.to_string().contains("bad upgrade step \"Sleeping\""),
            "{e}"
        );
    }
}

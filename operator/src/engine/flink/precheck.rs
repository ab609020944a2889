//! The savepoint pre-check's contract: how it is run and what its verdict means.
//!
//! The checker (`flink/checker`, Java) runs in a short-lived pod of the *new* image with the
//! target Flink version's jars, builds the new job's graph without running it and compares it
//! with the savepoint's `_metadata` as Flink's restore would: format version readable, every
//! operator with state mapped (operator id = murmur3 of its uid), explicitly set max parallelism
//! equal. It prints one JSON verdict line; this module reads it and words the block reason.
//!
//! Flink 1.x savepoints hold operator ids only; Flink 2.x ones also hold uids. To name the uid
//! of a 1.x savepoint's orphaned state, [`Verdict::outcome`] hashes the uids the running
//! version declared (the previous verdict's `operators`) and matches them to the ids.

use std::io::Cursor;

use serde::Deserialize;

use super::FlinkError;

/// `_metadata` starts with this magic number, then the format version (both big-endian `int`s).
pub const METADATA_MAGIC: u32 = 0x4960_672d;

/// Main class of the checker jar.
pub const CHECKER_MAIN: &str = "dev.streamjob.flink.checker.Check";

/// JVM options Flink's own scripts pass on Java 17 (closure cleaning and serialisation reflect
/// into the JDK); the JobManager's `/jars/:id/run` and the checker fail without them.
pub const JAVA_17_OPTIONS: &[&str] = &[
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
];

/// What the checker is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRequest {
    /// The savepoint (its directory or `_metadata`), as Flink addresses it.
    pub savepoint: String,
    /// The new job's jar.
    pub jar: String,
    pub entry_class: Option<String>,
    pub args: Vec<String>,
    pub parallelism: u32,
    pub allow_non_restored_state: bool,
    /// Flink configuration the job graph is built and its state restored with: the job's
    /// `flinkConfiguration` (its state backend) and `pipeline.max-parallelism`.
    pub conf: Vec<(String, String)>,
}

impl CheckRequest {
    /// The checker's arguments (after the JVM options, classpath and main class).
    pub fn arguments(&self) -> Vec<String> {
        let mut out = vec![
            "--savepoint".to_string(),
            self.savepoint.clone(),
            "--jar".to_string(),
            self.jar.clone(),
            "--parallelism".to_string(),
            self.parallelism.to_string(),
        ];
        if let Some(class) = &self.entry_class {
            out.extend(["--class".to_string(), class.clone()]);
        }
        if self.allow_non_restored_state {
            out.push("--allow-non-restored-state".to_string());
        }
        for (key, value) in &self.conf {
            out.extend(["--conf".to_string(), format!("{key}={value}")]);
        }
        out.push("--".to_string());
        out.extend(self.args.iter().cloned());
        out
    }
}

/// The checker's verdict line.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `compatible`, `incompatible` or `error` (the check itself could not run).
    pub verdict: String,
    #[serde(default)]
    pub flink_version: Option<String>,
    #[serde(default)]
    pub format_version: Option<u32>,
    #[serde(default)]
    pub savepoint_operators: u32,
    #[serde(default)]
    pub problems: Vec<Problem>,
    /// Operators' state left behind under `allowNonRestoredState` (the operator is gone).
    #[serde(default)]
    pub not_restored: Vec<OperatorRef>,
    /// States of kept operators that the new operator no longer registers when it starts
    /// (renamed or removed descriptors): dropped under `allowNonRestoredState`, else a problem.
    #[serde(default)]
    pub dropped_states: Vec<DroppedState>,
    /// The new job's operators (kept to name the uids of the next upgrade's savepoint).
    #[serde(default)]
    pub operators: Vec<JobOperator>,
    /// Why an `error` verdict could not check.
    #[serde(default)]
    pub message: Option<String>,
}

/// One reason the savepoint cannot be restored.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub operator_id: Option<String>,
    pub uid: Option<String>,
    /// `format-version`, `unmapped-state`, `max-parallelism`.
    pub kind: String,
    pub message: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OperatorRef {
    pub operator_id: String,
    pub uid: Option<String>,
}

/// A saved state the new operator does not register.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DroppedState {
    pub uid: Option<String>,
    /// The state's name (the descriptor's).
    pub state: String,
    /// VALUE, LIST, MAP, … as the savepoint records it.
    #[serde(default)]
    pub kind: String,
}

/// An operator of the checked job graph.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobOperator {
    pub operator_id: String,
    pub uid: Option<String>,
    pub name: Option<String>,
    /// -1 when the job does not set it (then it is taken from the savepoint).
    pub max_parallelism: i64,
}

/// Reads the verdict from the checker's output (the last line that is one; the user's `main()`
/// may print before it).
pub fn parse_verdict(output: &str) -> Result<Verdict, FlinkError> {
    output
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str::<Verdict>(l).ok())
        .ok_or_else(|| {
            let tail: Vec<&str> = output.lines().rev().take(5).collect();
            FlinkError::Verdict(format!(
                "the checker printed no verdict; its last lines: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ))
        })
}

impl Verdict {
    /// Ok when the savepoint restores; else the block reason, naming each operator by uid
    /// (from the verdict, or by hashing `known_uids`), else by id.
    pub fn outcome(&self, known_uids: &[String]) -> Result<(), String> {
        match self.verdict.as_str() {
            "compatible" => Ok(()),
            "incompatible" if !self.problems.is_empty() => {
                let mut reasons: Vec<String> = Vec::new();
                // A max parallelism set anew applies to every operator: one reason lists them.
                let mut max_parallelism: Vec<(&str, Vec<String>)> = Vec::new();
                for problem in &self.problems {
                    if problem.kind == "max-parallelism" {
                        let name = self.name(problem, known_uids);
                        match max_parallelism
                            .iter_mut()
                            .find(|(m, _)| *m == problem.message)
                        {
                            Some((_, names)) => names.push(name),
                            None => max_parallelism.push((&problem.message, vec![name])),
                        }
                    } else {
                        reasons.push(self.word(problem, known_uids));
                    }
                }
                for (message, names) in max_parallelism {
                    reasons.push(format!("{}: {message}", names.join(", ")));
                }
                Err(reasons.join("; "))
            }
            "error" => Err(format!(
                "the savepoint pre-check could not run: {}",
                self.message.as_deref().unwrap_or("no message")
            )),
            other => Err(format!(
                "the savepoint pre-check gave no usable verdict ({other:?} with {} problems)",
                self.problems.len()
            )),
        }
    }

    /// What a compatible restore drops, as (uid or operator id, why) rows: whole operators gone
    /// from the job, then states the kept operators no longer register.
    pub fn dropped(&self) -> Vec<(String, String)> {
        let operators = self.not_restored.iter().map(|o| {
            (
                o.uid.clone().unwrap_or_else(|| o.operator_id.clone()),
                "no operator of the new job restores it: all of its state".to_string(),
            )
        });
        let states = self.dropped_states.iter().map(|d| {
            (
                d.uid.clone().unwrap_or_else(|| "(no uid)".into()),
                format!(
                    "state \"{}\" ({}) is not registered when the operator starts (renamed or \
                     removed; kept only if the job registers it later at run time)",
                    d.state, d.kind
                ),
            )
        });
        operators.chain(states).collect()
    }

    fn uid(problem: &Problem, known_uids: &[String]) -> Option<String> {
        problem.uid.clone().or_else(|| {
            let id = problem.operator_id.as_deref()?;
            known_uids.iter().find(|u| operator_id(u) == id).cloned()
        })
    }

    /// `operator uid "x"`, else `operator <id>`.
    fn name(&self, problem: &Problem, known_uids: &[String]) -> String {
        match (Self::uid(problem, known_uids), &problem.operator_id) {
            (Some(uid), _) => format!("operator uid \"{uid}\""),
            (None, Some(id)) => format!("operator {id}"),
            (None, None) => "the savepoint".to_string(),
        }
    }

    fn word(&self, problem: &Problem, known_uids: &[String]) -> String {
        match (
            problem.kind.as_str(),
            Self::uid(problem, known_uids),
            &problem.operator_id,
        ) {
            ("unmapped-state", Some(uid), Some(id)) => format!(
                "operator uid \"{uid}\" (id {id}): the savepoint holds its state but the new job \
                 has no operator with that uid (removed or renamed); set \
                 allowNonRestoredState to drop that state"
            ),
            ("unmapped-state", None, Some(id)) => format!(
                "operator {id}: the savepoint holds its state but the new job has no operator \
                 with that id (removed, or its uid renamed; a Flink 1.x savepoint records ids, not \
                 uids); set allowNonRestoredState to drop that state"
            ),
            ("format-version", _, _) => problem.message.clone(),
            (_, Some(_), _) => format!("{}: {}", self.name(problem, known_uids), problem.message),
            _ => problem.message.clone(),
        }
    }
}

/// Flink's operator id of an operator with `uid`: murmur3 x64 128 (seed 0) of the uid's UTF-8
/// bytes, printed as its two 64-bit halves, each little-endian (`counter` →
/// `0da08f51eaa85fc298e176a139b3649a`).
pub fn operator_id(uid: &str) -> String {
    // The reader is a byte slice: hashing it cannot fail.
    let hash = murmur3::murmur3_x64_128(&mut Cursor::new(uid.as_bytes()), 0).unwrap_or_default();
    let h1 = (hash & u128::from(u64::MAX)) as u64;
    let h2 = (hash >> 64) as u64;
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&h1.to_le_bytes());
    bytes[8..].copy_from_slice(&h2.to_le_bytes());
    hex::encode(bytes)
}

/// The format version of a savepoint from the first bytes of its `_metadata`.
pub fn metadata_format_version(head: &[u8]) -> Result<u32, FlinkError> {
    let word = |at: usize| -> Option<u32> {
        head.get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
    };
    match (word(0), word(4)) {
        (Some(METADATA_MAGIC), Some(version)) => Ok(version),
        (Some(magic), _) if magic != METADATA_MAGIC => Err(FlinkError::Metadata(format!(
            "not a savepoint's _metadata (magic {magic:#010x}, expected {METADATA_MAGIC:#010x})"
        ))),
        _ => Err(FlinkError::Metadata(format!(
            "_metadata too short ({} bytes)",
            head.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_ids_are_flinks() {
        // Values Flink itself computed (FLINK-ENGINE-NOTES; and the checker's output here).
        assert_eq!(operator_id("counter"), "0da08f51eaa85fc298e176a139b3649a");
        assert_eq!(operator_id("gen-src"), "710bab4fe7784c358756fe2127502a8b");
        assert_eq!(
            operator_id("print-sink"),
            "89f21f775f44942d9cc73c012629f763"
        );
        assert_eq!(operator_id("numbers"), "ca88eee0095684d687a1b6495617f957");
    }

    #[test]
    fn format_version_comes_from_the_header() {
        let mut head = METADATA_MAGIC.to_be_bytes().to_vec();
        head.extend(6u32.to_be_bytes());
        head.extend([0, 0, 0]);
        assert_eq!(metadata_format_version(&head).unwrap(), 6);
        let wrong = metadata_format_version(b"PK\x03\x04\0\0\0\x01").unwrap_err();
        assert!(wrong.to_string().contains("not a savepoint"), "{wrong}");
        assert!(metadata_format_version(&head[..5]).is_err());
    }

    #[test]
    fn a_1x_verdict_is_worded_with_the_running_uids() {
        let out = "job main printed this\n{\"verdict\":\"incompatible\",\"flinkVersion\":\"1.20.0\",\"formatVersion\":4,\"savepointOperators\":5,\
            \"problems\":[{\"operatorId\":\"0da08f51eaa85fc298e176a139b3649a\",\"uid\":null,\"kind\":\"unmapped-state\",\"message\":\"m\"},\
            {\"operatorId\":\"ca88eee0095684d687a1b6495617f957\",\"uid\":\"numbers\",\"kind\":\"max-parallelism\",\"message\":\"max parallelism changed from 128 to 256\"}],\
            \"notRestored\":[],\"operators\":[]}\n";
        let verdict = parse_verdict(out).unwrap();
        let reason = verdict
            .outcome(&["numbers".into(), "counter".into()])
            .unwrap_err();
        assert!(
            reason.starts_with("operator uid \"counter\" (id 0da08f51eaa85fc298e176a139b3649a)"),
            "{reason}"
        );
        assert!(
            reason.contains("operator uid \"numbers\": max parallelism changed from 128 to 256"),
            "{reason}"
        );
        assert!(
            verdict_with_two_max_parallelism_problems()
                .outcome(&[])
                .unwrap_err()
                .ends_with("operator uid \"a\", operator uid \"b\": max parallelism changed from 128 to 256"),
        );
        // Without the running version's uids the id is all there is.
        assert!(verdict.outcome(&[]).unwrap_err().starts_with(
            "operator 0da08f51eaa85fc298e176a139b3649a: the savepoint holds its state"
        ));
    }

    fn verdict_with_two_max_parallelism_problems() -> Verdict {
        let problem = |uid: &str| Problem {
            operator_id: Some(operator_id(uid)),
            uid: Some(uid.to_string()),
            kind: "max-parallelism".into(),
            message: "max parallelism changed from 128 to 256".into(),
        };
        Verdict {
            verdict: "incompatible".into(),
            flink_version: Some("2.3.0".into()),
            format_version: Some(6),
            savepoint_operators: 2,
            problems: vec![problem("a"), problem("b")],
            not_restored: vec![],
            dropped_states: vec![],
            operators: vec![],
            message: None,
        }
    }

    #[test]
    fn an_unrestorable_state_serializer_is_named_by_its_operator() {
        // the checker's compact termination message (measured: AuditTally deleted from the image)
        let line = r#"{"verdict":"incompatible","flinkVersion":"2.3.0","formatVersion":6,"problems":[{"operatorId":"b864716503adbe27d91981bb81974494","uid":"audit","kind":"state-serializer","message":"its state's serializers cannot be read with the new job's classes (IOException Could not find class 'AuditTally' in classpath.)"}]}"#;
        let reason = parse_verdict(line).unwrap().outcome(&[]).unwrap_err();
        assert_eq!(
            reason,
            "operator uid \"audit\": its state's serializers cannot be read with the new job's classes (IOException Could not find class 'AuditTally' in classpath.)"
        );
    }

    #[test]
    fn errors_and_silence_block() {
        let error =
            parse_verdict("{\"verdict\":\"error\",\"message\":\"ClassNotFoundException x\"}")
                .unwrap();
        assert_eq!(
            error.outcome(&[]).unwrap_err(),
            "the savepoint pre-check could not run: ClassNotFoundException x"
        );
        let none = parse_verdict("Exception in thread main\n\tat x").unwrap_err();
        assert!(none.to_string().contains("printed no verdict"), "{none}");
        let request = CheckRequest {
            savepoint: "s3://b/sp-1".into(),
            jar: "/opt/flink/usrlib/job.jar".into(),
            entry_class: Some("com.example.Job".into()),
            args: vec!["--output".into(), "s3://b/out".into()],
            parallelism: 3,
            allow_non_restored_state: true,
            conf: vec![("pipeline.max-parallelism".into(), "128".into())],
        };
        assert_eq!(
            request.arguments().join(" "),
            "--savepoint s3://b/sp-1 --jar /opt/flink/usrlib/job.jar --parallelism 3 --class \
             com.example.Job --allow-non-restored-state --conf pipeline.max-parallelism=128 -- \
             --output s3://b/out"
        );
    }
}

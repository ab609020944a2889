//! The operator's finalizer (`streamjob.io/dispose-savepoints`) added and removed with a
//! precondition, as kube's finalizer helper (`kube::runtime::finalizer`) does: a JSON patch whose
//! first operation tests the list as it was read. If another controller added or removed a
//! finalizer meanwhile, the API server refuses the patch (422) instead of writing back a stale
//! list without it, and the next reconcile works on the fresh object.
//!
//! Not the helper itself: our finalizer is present only while `spec.savepoints.disposeOnDelete`
//! is set (a job that keeps its savepoints is deleted at once), and the helper always adds it.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use serde_json::Value;

/// `/metadata/finalizers`, or one entry of it (an index, or `-`: after the last).
fn pointer(entry: Option<&str>) -> PointerBuf {
    let mut tokens = vec!["metadata", "finalizers"];
    tokens.extend(entry);
    PointerBuf::from_tokens(tokens)
}

/// The patch adding `name` to `current` (the list as read); `None` if it is there.
pub(super) fn add(current: &[String], name: &str) -> Option<Patch> {
    if current.iter().any(|f| f == name) {
        return None;
    }
    Some(Patch(if current.is_empty() {
        vec![
            PatchOperation::Test(TestOperation {
                path: pointer(None),
                value: Value::Null,
            }),
            PatchOperation::Add(AddOperation {
                path: pointer(None),
                value: vec![name].into(),
            }),
        ]
    } else {
        vec![
            // the API server does not deduplicate finalizers: the whole list is the precondition
            PatchOperation::Test(TestOperation {
                path: pointer(None),
                value: current.into(),
            }),
            PatchOperation::Add(AddOperation {
                path: pointer(Some("-")),
                value: name.into(),
            }),
        ]
    }))
}

/// The patch removing `name` from `current`; `None` if it is not there. It tests the entry at
/// the index it removes, so it never removes another controller's finalizer that moved there.
pub(super) fn remove(current: &[String], name: &str) -> Option<Patch> {
    let index = current.iter().position(|f| f == name)?;
    let at = pointer(Some(&index.to_string()));
    Some(Patch(vec![
        PatchOperation::Test(TestOperation {
            path: at.clone(),
            value: name.into(),
        }),
        PatchOperation::Remove(RemoveOperation { path: at }),
    ]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const OURS: &str = "streamjob.io/dispose-savepoints";

    /// Applies `patch` to an object whose finalizers are `list`. `None`: the field is absent (the
    /// API server stores no empty list); the API server's JSON patch tests a missing value as
    /// `null`, which the Rust implementation does not, so it is given `null`.
    fn apply(list: Option<&[&str]>, patch: &Patch) -> Result<Vec<String>, String> {
        let mut doc = match list {
            Some(l) => serde_json::json!({"metadata": {"finalizers": l}}),
            None => serde_json::json!({"metadata": {"finalizers": null}}),
        };
        json_patch::patch(&mut doc, patch).map_err(|e| e.to_string())?;
        Ok(serde_json::from_value(doc["metadata"]["finalizers"].clone()).unwrap_or_default())
    }

    #[test]
    fn added_to_the_list_as_read() {
        let p = add(&[], OURS).unwrap();
        assert_eq!(apply(None, &p).unwrap(), [OURS]);
        let read = ["other.io/keep".to_string()];
        let p = add(&read, OURS).unwrap();
        assert_eq!(
            apply(Some(&["other.io/keep"]), &p).unwrap(),
            ["other.io/keep", OURS]
        );
        assert!(add(&[OURS.to_string()], OURS).is_none());
    }

    /// Another controller changed the list after we read it: the patch fails, nothing is lost.
    #[test]
    fn a_list_changed_meanwhile_refuses_the_patch() {
        let p = add(&[], OURS).unwrap();
        assert!(apply(Some(&["other.io/new"]), &p).is_err());
        let p = add(&["a.io/x".to_string()], OURS).unwrap();
        assert!(apply(Some(&["a.io/x", "b.io/y"]), &p).is_err());
        // removal: the entry at our index is now someone else's
        let read = ["a.io/x".to_string(), OURS.to_string()];
        let p = remove(&read, OURS).unwrap();
        assert!(apply(Some(&["b.io/y", "a.io/x"]), &p).is_err());
        assert_eq!(
            apply(Some(&["a.io/x", OURS, "c.io/z"]), &p).unwrap(),
            ["a.io/x", "c.io/z"]
        );
    }

    #[test]
    fn removed_only_when_present() {
        assert!(remove(&["a.io/x".to_string()], OURS).is_none());
        let p = remove(&[OURS.to_string()], OURS).unwrap();
        assert!(apply(Some(&[OURS]), &p).unwrap().is_empty());
    }
}

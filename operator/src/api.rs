//! Small helpers over Kubernetes API results shared by the controller and the engine adapters.

use crate::Result;

/// A create that found the object already there is done: actions are idempotent.
pub(crate) fn ignore_conflict<T>(r: std::result::Result<T, kube::Error>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A delete that found nothing is done.
pub(crate) fn ignore_missing<T>(r: std::result::Result<T, kube::Error>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

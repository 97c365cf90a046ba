//! [`TemporalPlanError`]: why a temporal profile cannot be planned from.

use crate::profile::ProfileError;

/// Why a [`TemporalProfile`](super::TemporalProfile) cannot be planned from, or read or written.
#[derive(Debug, thiserror::Error)]
pub enum TemporalPlanError {
    /// The profile file could not be read or written, or is not valid JSON.
    #[error(transparent)]
    File(#[from] ProfileError),
    /// A field of the profile is out of range or inconsistent with another.
    #[error("temporal profile: `{field}` = {value} ({reason})")]
    Invalid {
        /// The offending field, as the profile's JSON names it.
        field: &'static str,
        /// The offending value.
        value: String,
        /// What is required of it.
        reason: String,
    },
}

impl TemporalPlanError {
    /// An [`Invalid`](Self::Invalid) error for `field` holding `value`.
    pub(crate) fn invalid(field: &'static str, value: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

//! The known applications and correlation: whether an envelope belongs to an application
//! as it stands now (tenant, id, business key, current material version).
//!
//! Applications are found by `(tenant_id, application_id)` only, so an id that exists under
//! another tenant is, by construction, answered exactly like an id that exists nowhere.

use super::envelope::Envelope;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Where an application lives: its id is unique only within its tenant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AppKey {
    /// The tenant.
    pub tenant_id: String,
    /// The application, a UUID unique within the tenant.
    pub application_id: String,
}

impl AppKey {
    /// The key an envelope names.
    pub fn of(envelope: &Envelope) -> AppKey {
        AppKey {
            tenant_id: envelope.tenant_id().to_owned(),
            application_id: envelope.application_id().to_owned(),
        }
    }
}

impl fmt::Display for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant_id, self.application_id)
    }
}

/// What is known of one application.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Application {
    /// Human-readable; checked, never used to find the application.
    pub business_key: String,
    /// The version of the submitted material that facts must refer to (>= 1).
    pub material_version: u64,
}

/// Why an envelope does not belong to an application as it stands (ingress check 9, and
/// the consumer's re-check).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mismatch {
    /// No such `(tenant_id, application_id)`, including an id of another tenant.
    UnknownApplication,
    /// The business key differs from the application's.
    BusinessKeyMismatch,
    /// The material version is not the application's current one.
    MaterialVersionMismatch,
}

impl Mismatch {
    /// The reason word.
    pub fn as_str(self) -> &'static str {
        match self {
            Mismatch::UnknownApplication => "unknown_application",
            Mismatch::BusinessKeyMismatch => "business_key_mismatch",
            Mismatch::MaterialVersionMismatch => "material_version_mismatch",
        }
    }
}

/// Why a material upgrade was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum UpgradeError {
    /// No such application.
    #[error("no application {0}")]
    Unknown(AppKey),
    /// Material versions only move forward.
    #[error("material version {to} is not newer than the current {current}")]
    NotNewer {
        /// The current version.
        current: u64,
        /// The version asked for.
        to: u64,
    },
}

/// The registry of applications, keyed by `(tenant_id, application_id)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Applications {
    by_key: BTreeMap<AppKey, Application>,
}

impl Applications {
    /// No applications.
    pub fn new() -> Applications {
        Applications::default()
    }

    /// Registers an application (replacing one with the same key); returns the one
    /// replaced, if any.
    pub fn insert(&mut self, key: AppKey, application: Application) -> Option<Application> {
        self.by_key.insert(key, application)
    }

    /// The application under `key`.
    pub fn get(&self, key: &AppKey) -> Option<&Application> {
        self.by_key.get(key)
    }

    /// Every application, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&AppKey, &Application)> {
        self.by_key.iter()
    }

    /// How many applications are known.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// A material upgrade: the application's current version moves to `to`, which must be
    /// newer. Returns the previous version.
    pub fn upgrade(&mut self, key: &AppKey, to: u64) -> Result<u64, UpgradeError> {
        let application = self
            .by_key
            .get_mut(key)
            .ok_or_else(|| UpgradeError::Unknown(key.clone()))?;
        if to <= application.material_version {
            return Err(UpgradeError::NotNewer {
                current: application.material_version,
                to,
            });
        }
        Ok(std::mem::replace(&mut application.material_version, to))
    }

    /// Correlates an envelope with the application it names, as that application stands
    /// now: first the key, then the business key, then the material version.
    pub fn correlate(&self, envelope: &Envelope) -> Result<AppKey, Mismatch> {
        let key = AppKey::of(envelope);
        let application = self.by_key.get(&key).ok_or(Mismatch::UnknownApplication)?;
        if application.business_key != envelope.business_key() {
            return Err(Mismatch::BusinessKeyMismatch);
        }
        if application.material_version != envelope.material_version() {
            return Err(Mismatch::MaterialVersionMismatch);
        }
        Ok(key)
    }
}

//! The known applications, their lifecycle (register, upgrade, terminate: contract v2's
//! operator steps on the registry) and correlation: whether an envelope belongs to an
//! application as it stands now (tenant, id, business key, current material version).
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
    /// Set once it is terminated (final): its facts are kept, never counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<Termination>,
}

impl Application {
    /// An active application.
    pub fn active(business_key: impl Into<String>, material_version: u64) -> Application {
        Application {
            business_key: business_key.into(),
            material_version,
            terminated: None,
        }
    }

    /// Whether it is active (not terminated).
    pub fn is_active(&self) -> bool {
        self.terminated.is_none()
    }
}

/// Why and when an application was terminated.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Termination {
    /// The operator's reason.
    pub reason: String,
    /// When (Unix seconds).
    pub at: i64,
}

/// What a registration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Registered {
    /// A new application.
    New,
    /// It existed with the same business key and material version: nothing changed.
    Unchanged,
    /// It existed with an older material version, which moved forward from this one.
    Upgraded {
        /// The version before.
        from: u64,
    },
}

impl LifecycleError {
    /// The command-line flag an operator would correct.
    pub fn flag(&self) -> &'static str {
        match self {
            LifecycleError::Unknown(_) | LifecycleError::Terminated(_) => "--application",
            LifecycleError::NotNewer { .. } | LifecycleError::Backwards { .. } => {
                "--material-version"
            }
            LifecycleError::OtherBusinessKey { .. } => "--business-key",
            LifecycleError::Invalid { field, .. } => match *field {
                "tenant_id" => "--tenant",
                "application_id" => "--application",
                "business_key" => "--business-key",
                "reason" => "--reason",
                _ => "--material-version",
            },
        }
    }
}

impl Registered {
    /// The word in reports: `new`, `unchanged`, `upgraded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Registered::New => "new",
            Registered::Unchanged => "unchanged",
            Registered::Upgraded { .. } => "upgraded",
        }
    }
}

/// Why an operator step on the registry was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LifecycleError {
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
    /// A registration may never move a material version backwards.
    #[error(
        "material version {to} is older than the current {current}: versions never move backwards"
    )]
    Backwards {
        /// The current version.
        current: u64,
        /// The version asked for.
        to: u64,
    },
    /// A registration names another business key than the application has.
    #[error("business key `{asked}` differs from the application's `{current}`")]
    OtherBusinessKey {
        /// The application's.
        current: String,
        /// The registration's.
        asked: String,
    },
    /// Termination is final.
    #[error("application {0} is terminated")]
    Terminated(AppKey),
    /// A value no envelope could ever match (or an empty reason): refused before anything
    /// is kept, because a registration cannot be taken back.
    #[error("{field}: {problem}")]
    Invalid {
        /// `tenant_id`, `application_id`, `business_key`, `material_version` or `reason`.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// Refuses an id an envelope could not carry: empty, or longer than
/// [`MAX_ID_BYTES`](super::envelope::MAX_ID_BYTES).
fn valid_id(field: &'static str, text: &str) -> Result<(), LifecycleError> {
    let max = super::envelope::MAX_ID_BYTES;
    if text.is_empty() || text.len() > max {
        return Err(LifecycleError::Invalid {
            field,
            problem: format!("{} bytes; an envelope carries 1 to {max}", text.len()),
        });
    }
    Ok(())
}

/// Refuses a material version an envelope could not carry.
fn valid_version(version: u64) -> Result<(), LifecycleError> {
    let max = super::envelope::MAX_MATERIAL_VERSION;
    if !(1..=max).contains(&version) {
        return Err(LifecycleError::Invalid {
            field: "material_version",
            problem: format!("{version} is not from 1 to {max}"),
        });
    }
    Ok(())
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

/// The refusal of an upgrade (kept under its old name).
pub type UpgradeError = LifecycleError;

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

    /// Registers an application (contract v2): new, or existing with the same business key
    /// and the same or a newer material version. Never backwards, never another business
    /// key, never a terminated application.
    pub fn register(
        &mut self,
        key: &AppKey,
        business_key: &str,
        material_version: u64,
    ) -> Result<Registered, LifecycleError> {
        valid_id("tenant_id", &key.tenant_id)?;
        valid_id("application_id", &key.application_id)?;
        valid_id("business_key", business_key)?;
        valid_version(material_version)?;
        let Some(current) = self.by_key.get_mut(key) else {
            self.by_key.insert(
                key.clone(),
                Application::active(business_key, material_version),
            );
            return Ok(Registered::New);
        };
        if !current.is_active() {
            return Err(LifecycleError::Terminated(key.clone()));
        }
        if current.business_key != business_key {
            return Err(LifecycleError::OtherBusinessKey {
                current: current.business_key.clone(),
                asked: business_key.to_owned(),
            });
        }
        match material_version.cmp(&current.material_version) {
            std::cmp::Ordering::Less => Err(LifecycleError::Backwards {
                current: current.material_version,
                to: material_version,
            }),
            std::cmp::Ordering::Equal => Ok(Registered::Unchanged),
            std::cmp::Ordering::Greater => Ok(Registered::Upgraded {
                from: std::mem::replace(&mut current.material_version, material_version),
            }),
        }
    }

    /// The active application under `key`, to change; unknown and terminated are refused.
    fn active_mut(&mut self, key: &AppKey) -> Result<&mut Application, LifecycleError> {
        let application = self
            .by_key
            .get_mut(key)
            .ok_or_else(|| LifecycleError::Unknown(key.clone()))?;
        if !application.is_active() {
            return Err(LifecycleError::Terminated(key.clone()));
        }
        Ok(application)
    }

    /// A material upgrade: the application's current version moves to `to`, which must be
    /// newer; refused for a terminated application. Returns the previous version.
    pub fn upgrade(&mut self, key: &AppKey, to: u64) -> Result<u64, LifecycleError> {
        valid_version(to)?;
        let application = self.active_mut(key)?;
        if to <= application.material_version {
            return Err(LifecycleError::NotNewer {
                current: application.material_version,
                to,
            });
        }
        Ok(std::mem::replace(&mut application.material_version, to))
    }

    /// Terminates an application (final).
    pub fn terminate(&mut self, key: &AppKey, reason: &str, at: i64) -> Result<(), LifecycleError> {
        if reason.trim().is_empty() {
            return Err(LifecycleError::Invalid {
                field: "reason",
                problem: "a termination keeps its reason: give one".into(),
            });
        }
        let application = self.active_mut(key)?;
        application.terminated = Some(Termination {
            reason: reason.to_owned(),
            at,
        });
        Ok(())
    }

    /// For the mutant catalogue only: the registry with every termination forgotten.
    pub(super) fn all_active(&self) -> Applications {
        let mut copy = self.clone();
        for application in copy.by_key.values_mut() {
            application.terminated = None;
        }
        copy
    }

    /// For the mutant catalogue only: sets an application's material version, whatever it
    /// was (version 1's `init` run again).
    pub(super) fn overwrite(&mut self, key: &AppKey, application: Application) {
        self.by_key.insert(key.clone(), application);
    }

    /// Correlates an envelope with the application it names, as that application stands
    /// now: first the key, then the business key, then the material version. A terminated
    /// application still correlates (its facts are kept as `after_termination`).
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

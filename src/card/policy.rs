//! The policy a run chooses by name: the contract's (`spec`) or one of the wrong receivers
//! in [`crate::card::mutants`]. The decision function is generic over [`Policy`]: [`Spec`]
//! answers every hook as the contract does, as constants, so the mutant catalogue costs the
//! production receiver nothing.

pub use crate::card::mutants::Mutant;
pub use crate::card::receiver::{Policy, Spec};
use std::fmt;
use std::str::FromStr;

/// A policy chosen by name: `spec` or a mutant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PolicyName(pub Option<Mutant>);

impl PolicyName {
    /// SPEC, then every mutant in catalogue order.
    pub fn every() -> Vec<PolicyName> {
        std::iter::once(PolicyName(None))
            .chain(
                Mutant::ALL
                    .into_iter()
                    .map(|mutant| PolicyName(Some(mutant))),
            )
            .collect()
    }

    /// Every accepted name, `spec` first.
    pub fn all_names() -> Vec<&'static str> {
        std::iter::once("spec")
            .chain(Mutant::ALL.iter().map(|mutant| mutant.name()))
            .collect()
    }
}

impl FromStr for PolicyName {
    type Err = String;

    fn from_str(text: &str) -> Result<PolicyName, String> {
        if text == "spec" {
            return Ok(PolicyName(None));
        }
        Mutant::ALL
            .into_iter()
            .chain(Mutant::PROBES)
            .find(|mutant| mutant.name() == text)
            .map(|mutant| PolicyName(Some(mutant)))
            .ok_or_else(|| {
                format!(
                    "unknown policy `{text}`; expected one of: {}",
                    PolicyName::all_names().join(", ")
                )
            })
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.map_or("spec", Mutant::name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in PolicyName::all_names() {
            let policy: PolicyName = name.parse().unwrap();
            assert_eq!(policy.to_string(), name);
        }
        assert!("latest-wins".parse::<PolicyName>().is_err());
    }
}

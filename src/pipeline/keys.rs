//! The keys file of `serve`: read and validated ([`load_keys`]), checked for permissions
//! looser than the owner's ([`warn_if_loose`]), and read again on SIGHUP ([`reread`]),
//! where a bad file keeps the keys in use. Never prints a secret: log lines name the
//! file, the key ids and what is wrong.

use crate::facts::envelope::Source;
use crate::facts::fixture::{keys_from, Keys, RawKey};
use crate::harness::InputError;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads a keys file: `{"finance": ["key", ...], "contracts": [...]}`. The keys are never
/// printed.
pub fn load_keys(path: &Path) -> Result<Keys, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Io {
        file: path.to_owned(),
        source,
    })?;
    let raw: KeysFile = serde_json::from_str(&text).map_err(|error| {
        InputError::invalid(
            path,
            format!("line {}:{}", error.line(), error.column()),
            format!(
                "{error}; expected {{\"keys\": [{{\"id\": ..., \"source\": ..., \"secret\": ..., \
                 \"tenants\": [...]}}]}} or version 1's {{\"finance\": [\"secret\", ...], \"contracts\": [...]}}"
            ),
        )
    })?;
    let (secrets, keys) = match raw {
        KeysFile::Keys { keys } => (BTreeMap::new(), keys),
        KeysFile::Secrets(secrets) => (secrets, Vec::new()),
    };
    keys_from(&secrets, &keys).map_err(|(place, message)| InputError::invalid(path, place, message))
}

/// A keys file: contract v2's `{"keys": [...]}`, or version 1's source -> secrets map.
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(untagged)]
pub enum KeysFile {
    /// Keys with ids, tenants and windows.
    Keys {
        /// The keys.
        keys: Vec<RawKey>,
    },
    /// Version 1: each source's secrets, for every tenant.
    Secrets(BTreeMap<Source, Vec<String>>),
}

/// The permission bits a file grants its group and others (`mode & 0o077`), when it grants
/// any; `None` when only its owner has access, or when they cannot be read.
pub fn loose_permissions(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Logs a warning when group or others may read (or change) the keys file.
pub fn warn_if_loose(path: &Path) {
    if let Some(mode) = loose_permissions(path) {
        tracing::warn!(
            target: "arrival::keys",
            file = %path.display(),
            mode = %format!("{mode:04o}"),
            "the keys file holds secrets and its group or others have access to it; `chmod 600` it"
        );
    }
}

/// The ids of `keys`, comma-separated, for a log line.
pub fn key_ids(keys: &Keys) -> String {
    keys.values()
        .flatten()
        .map(|key| key.id.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// SIGHUP: the keys file read again. `Some` with the new keys (logged with their ids);
/// `None` when the file is bad, logged as an error that names the file and what is wrong,
/// and says that `in_use` keys stay in force.
pub fn reread(path: &Path, in_use: &Keys) -> Option<Keys> {
    warn_if_loose(path);
    match load_keys(path) {
        Ok(keys) => {
            tracing::info!(
                target: "arrival::keys",
                file = %path.display(),
                keys = keys.values().map(Vec::len).sum::<usize>(),
                ids = %key_ids(&keys),
                "keys reloaded"
            );
            Some(keys)
        }
        Err(error) => {
            tracing::error!(
                target: "arrival::keys",
                file = %path.display(),
                error = %error,
                kept = %key_ids(in_use),
                "keys not reloaded: the keys in use stay in force"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_file_only_its_owner_can_read_is_not_loose_and_one_others_can_read_is() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("arrival-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys.json");
        std::fs::write(&file, "{}").unwrap();
        let mode = |bits| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(bits));
        mode(0o600).unwrap();
        assert_eq!(loose_permissions(&file), None);
        mode(0o640).unwrap();
        assert_eq!(loose_permissions(&file), Some(0o640));
        mode(0o604).unwrap();
        assert_eq!(loose_permissions(&file), Some(0o604));
        assert_eq!(loose_permissions(&dir.join("missing.json")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_keys_file_on_reread_keeps_the_keys_in_use() {
        let dir = std::env::temp_dir().join(format!("arrival-reread-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys.json");
        std::fs::write(&file, r#"{"finance": ["finance-secret-of-24-bytes!"]}"#).unwrap();
        let in_use = load_keys(&file).unwrap();
        assert_eq!(key_ids(&in_use), "finance-1");
        std::fs::write(&file, r#"{"finance": ["short"]}"#).unwrap();
        assert_eq!(reread(&file, &in_use), None);
        std::fs::write(&file, "{not json").unwrap();
        assert_eq!(reread(&file, &in_use), None);
        std::fs::remove_file(&file).unwrap();
        assert_eq!(reread(&file, &in_use), None);
        std::fs::write(
            &file,
            r#"{"keys": [{"id": "fin-2", "source": "finance", "secret": "another-finance-secret-24b"}]}"#,
        )
        .unwrap();
        let fresh = reread(&file, &in_use).expect("a good file is taken");
        assert_eq!(key_ids(&fresh), "fin-2");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Model files: TOML read into a protocol's typed model file, with errors that name the
//! line, the key and the problem; and which protocol a fixture speaks.

use super::explore::Strategy;
use super::input::{plain_types, InputError};
use serde::de::DeserializeOwned;
use std::path::Path;

/// Reads a model file into `T` (whose serde attributes reject unknown keys).
pub fn parse<T: DeserializeOwned>(path: &Path) -> Result<T, InputError> {
    let text = super::input::read_text(path)?;
    toml::from_str(&text).map_err(|error| {
        let place = match error.span() {
            Some(span) => {
                let start = span.start.min(text.len());
                let before = &text[..start];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
                // Name the key when the error sits on one `key = value` line.
                let line_start = before.rfind('\n').map_or(0, |at| at + 1);
                let line_text = text[line_start..].lines().next().unwrap_or("");
                let on_one_line = !text[start..span.end.min(text.len())].contains('\n');
                match line_text.split_once('=') {
                    Some((key, _)) if on_one_line && !key.trim().is_empty() => {
                        format!("line {line}:{column} (key `{}`)", key.trim())
                    }
                    // A missing key is reported over the whole table.
                    _ if start == 0 && !on_one_line => "top level".into(),
                    _ => format!("line {line}:{column}"),
                }
            }
            None => "model file".into(),
        };
        // toml's syntax messages run over two lines ("invalid string\nexpected ...").
        let message = plain_types(error.message().trim()).replace('\n', "; ");
        let message = if text.parse::<toml::Table>().is_err() {
            format!("not valid TOML: {message}")
        } else {
            message
        };
        InputError::invalid(path, place, message)
    })
}

/// The protocol a model file's fixture speaks: the fixture's top-level `"protocol"` (`card`
/// when absent). Reads only as much as it needs; a fixture that cannot be read or parsed is
/// left for the protocol's own loader to report.
pub fn fixture_protocol(model: &Path) -> Option<String> {
    let text = std::fs::read_to_string(model).ok()?;
    let table: toml::Table = text.parse().ok()?;
    let fixture = table.get("fixture")?.as_str()?;
    let path = model.parent().unwrap_or(Path::new(".")).join(fixture);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    Some(
        json.get("protocol")
            .and_then(|protocol| protocol.as_str())
            .unwrap_or("card")
            .to_owned(),
    )
}

/// Loads the fixture a model file names (`fixture`, relative to the model file) with the
/// protocol's `load`. A fixture that cannot be read or is bad is reported against the model
/// file's `fixture` key, followed by what is wrong with the fixture.
pub fn load_fixture<T>(
    model: &Path,
    fixture: &str,
    load: impl FnOnce(&Path) -> Result<T, InputError>,
) -> Result<T, InputError> {
    let path = model.parent().unwrap_or(Path::new(".")).join(fixture);
    load(&path).map_err(|error| match error {
        InputError::Io { file, source } => InputError::invalid(
            model,
            "fixture",
            format!("cannot read {}: {source}", file.display()),
        ),
        invalid @ (InputError::Invalid { .. } | InputError::Write { .. }) => {
            InputError::invalid(model, "fixture", format!("bad fixture: {invalid}"))
        }
    })
}

/// Where a counterexample fixture came from: its `trace` block, the same for every
/// protocol. `replay` without `--policy` replays such a fixture under `policy`, so it shows
/// its violation.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TraceOrigin {
    /// The model file.
    pub model: String,
    /// The policy that was checked.
    pub policy: String,
    /// The property the schedule violates under that policy.
    pub violates: String,
}

/// Writes a counterexample fixture as `DIR/MODEL-STEM.PROPERTY.json` and returns its path.
pub fn write_trace(
    dir: &Path,
    model: &Path,
    property: &str,
    fixture: &impl serde::Serialize,
) -> Result<String, InputError> {
    let stem = model.file_stem().map_or_else(
        || "model".into(),
        |stem| stem.to_string_lossy().into_owned(),
    );
    let path = dir.join(format!("{stem}.{property}.json"));
    let io = |source| InputError::Write {
        file: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let text = serde_json::to_string_pretty(fixture).expect("fixtures serialise");
    std::fs::write(&path, text + "\n").map_err(io)?;
    Ok(path.display().to_string())
}

/// Run options given on the command line, overriding the model file's.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--strategy`.
    pub strategy: Option<Strategy>,
    /// `--state-limit`.
    pub state_limit: Option<usize>,
    /// `--properties` (names; the protocol checks them).
    pub properties: Option<Vec<String>>,
    /// `--budgets`: the protocol's fault budgets in its own order.
    pub budgets: Option<Vec<u8>>,
}

impl Overrides {
    /// Applies the common options to a model file's fields.
    pub fn apply(
        &self,
        threads: &mut usize,
        strategy: &mut Strategy,
        state_limit: &mut Option<usize>,
        properties: &mut Option<Vec<String>>,
    ) {
        if let Some(value) = self.threads {
            *threads = value;
        }
        if let Some(value) = self.strategy {
            *strategy = value;
        }
        if let Some(value) = self.state_limit {
            *state_limit = Some(value);
        }
        if let Some(value) = &self.properties {
            *properties = Some(value.clone());
        }
    }

    /// The budgets, checked to be exactly `names.len()` numbers (named in the error).
    pub fn budgets(&self, model: &Path, names: &[&str]) -> Result<Option<Vec<u8>>, InputError> {
        match &self.budgets {
            None => Ok(None),
            Some(values) if values.len() == names.len() => Ok(Some(values.clone())),
            Some(values) => Err(InputError::invalid(
                model,
                "--budgets",
                format!(
                    "this model takes {} budgets ({}), not {}",
                    names.len(),
                    names.join(","),
                    values.len()
                ),
            )),
        }
    }
}

/// Writes a counterexample's diagram beside its fixture: `STEM.mmd` (Mermaid) and
/// `STEM.svg`, where `fixture` is the `.json` path [`write_trace`] returned.
pub fn write_diagram(fixture: &str, diagram: &super::diagram::Diagram) -> Result<(), InputError> {
    let base = Path::new(fixture).with_extension("");
    for (extension, text) in [("mmd", diagram.mermaid()), ("svg", diagram.svg())] {
        let path = base.with_extension(format!(
            "{}.{extension}",
            base.extension()
                .map_or_else(String::new, |e| e.to_string_lossy().into_owned())
        ));
        std::fs::write(&path, text).map_err(|source| InputError::Write { file: path, source })?;
    }
    Ok(())
}

/// The most checker threads a run may ask for (the checker spawns them all at once).
pub const MAX_THREADS: usize = 256;

/// Checks the run options every model file has: `threads` from 1 to [`MAX_THREADS`], a
/// `state_limit` of at least 1.
pub fn check_run_options(
    model: &Path,
    threads: usize,
    state_limit: Option<usize>,
) -> Result<(), InputError> {
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(InputError::invalid(
            model,
            "threads",
            format!("must be at least 1 and at most {MAX_THREADS}, not {threads}"),
        ));
    }
    if state_limit == Some(0) {
        return Err(InputError::invalid(
            model,
            "state_limit",
            "must be at least 1 (leave it out for no limit)",
        ));
    }
    Ok(())
}

//! Drills.
use crate::harness::InputError;
/// Drill arguments.
#[derive(clap::Args, Debug)]
pub struct DrillArgs {}
/// Runs a drill.
pub fn cli(_: &DrillArgs) -> Result<bool, InputError> {
    Ok(true)
}

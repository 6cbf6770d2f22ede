//! Load.
use crate::harness::InputError;
/// Load arguments.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {}
/// Runs the load generator.
pub fn cli(_: &LoadArgs) -> Result<bool, InputError> {
    Ok(true)
}

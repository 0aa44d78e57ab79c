//! `storm`: not written yet.

use super::*;

/// Run it.
pub fn run(_s: &Settings) -> Result<Report, SettingError> {
    Err(SettingError::UnknownScenario("storm (not implemented yet)".into()))
}

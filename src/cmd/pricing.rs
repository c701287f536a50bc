//! `--profile`, resolved before any work starts: a profile file, the word `defaults` (twin's
//! A100-fitted defaults on every machine), or, when absent, the bundled profile of the
//! scenario's machine where one describes it ([`Pricing::Machine`]).

use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use twin_sim::profile::bundled::Pricing;

/// The value of `--profile` that asks for twin's defaults (a file of that name is read as
/// `./defaults`).
pub const DEFAULTS: &str = "defaults";

/// What `--profile` asks to price with.
pub fn from_arg(arg: Option<&Path>) -> anyhow::Result<Pricing> {
    match arg {
        None => Ok(Pricing::Machine),
        Some(p) if p.as_os_str() == DEFAULTS => Ok(Pricing::Defaults),
        Some(p) => Ok(Pricing::Profile(Arc::new(twin_sim::profile::load(p)?))),
    }
}

/// The profile `pricing` prices `scenario` with (`None`: the defaults).
pub fn profile_for(
    pricing: &Pricing,
    scenario: &twin_sim::scenario::Scenario,
) -> anyhow::Result<Option<Arc<twin_sim::profile::Profile>>> {
    pricing
        .profile_for(scenario)
        .with_context(|| format!("pricing scenario {}", scenario.name))
}

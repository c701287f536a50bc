//! Scenario files: the TOML a user writes, parsed and validated into a resolved [`Scenario`].
//! Errors name the file, line and column, the key, the value and what is allowed, because a
//! user with a typo in a 500-line config deserves better than "invalid type".

mod types;
pub use types::*;

//! The lab's exit codes and error type: sysexits codes as in the
//! `locksmith` command, and 1 for a chaos run whose checker found
//! violations.

/// Bad usage or input (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// Redis cannot be reached or does not answer (`EX_UNAVAILABLE`).
const UNAVAILABLE: u8 = 69;
/// A setup failure or an internal error (`EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = 70;
/// `chaos`: the checker found violations.
pub(crate) const CHECK_FAILED: u8 = 1;

/// What can make a lab command fail.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad input that clap could not catch.
    #[error("{0}")]
    Usage(String),
    /// An error from the lock library (connecting to a server given with
    /// `--redis`, say).
    #[error(transparent)]
    Lock(#[from] locksmith::Error),
    /// Anything else (a server that would not start, a failed phase, ...).
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Lock(e) if e.kind() == locksmith::ErrorKind::InvalidArgument => USAGE,
            CliError::Lock(e) if e.is_connection_error() => UNAVAILABLE,
            CliError::Lock(_) | CliError::Other(_) => SOFTWARE,
        }
    }
}

//! Exit codes (from sysexits.h, so scripts can tell failures apart from a
//! command's own statuses as well as possible) and the CLI's error type.

/// Bad usage or input (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// Redis cannot be reached or does not answer (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// Redis refused the credentials, or the ACL user lacks a right the
/// command needs (`EX_NOPERM`).
pub(crate) const NOPERM: u8 = 77;
/// The lock was lost while the command ran, or an internal error
/// (`EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = 70;
/// Default for "lock not acquired in time" (`EX_TEMPFAIL`: try again later).
pub(crate) const CONFLICT: u8 = 75;
/// The server is too old for locksmith, or for an option asked for
/// (`EX_CONFIG`: retrying cannot help; upgrading or changing the options
/// can).
pub(crate) const CONFIG: u8 = 78;
/// The command exists but could not be executed (as in sh).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as in sh).
pub(crate) const NOT_FOUND: u8 = 127;

/// What can make a subcommand fail; each maps to one exit code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad input that clap could not catch (e.g. refused without --force).
    #[error("{0}")]
    Usage(String),
    /// An error from the lock library; its kind decides the exit code.
    #[error(transparent)]
    Lock(#[from] locksmith::Error),
    /// CMD could not be started.
    #[error("cannot run {command:?}: {source}")]
    Spawn {
        /// The program name.
        command: String,
        /// Why the spawn failed (not found, permission denied, ...).
        source: std::io::Error,
    },
    /// Anything else (a broken pipe, a manual page that cannot be written, ...).
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        use locksmith::ErrorKind;
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Lock(e) => match e.kind() {
                ErrorKind::InvalidArgument => USAGE,
                ErrorKind::Connection
                | ErrorKind::Timeout
                | ErrorKind::NoQuorum
                | ErrorKind::Tls => UNAVAILABLE,
                ErrorKind::Unsupported => CONFIG,
                ErrorKind::Auth => NOPERM,
                ErrorKind::Busy => CONFLICT,
                _ => SOFTWARE,
            },
            CliError::Spawn { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => NOT_FOUND,
                _ => CANNOT_EXECUTE,
            },
            CliError::Other(_) => SOFTWARE,
        }
    }
}

/// The exit code a shell would report for a finished child: its status, or
/// 128 + the signal that killed it.
pub(crate) fn from_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        // Exit statuses are 0..=255 on Unix; the mask only documents it.
        return (code & 0xff) as u8;
    }
    match status.signal() {
        Some(sig) => (128 + sig).clamp(0, 255) as u8,
        None => SOFTWARE,
    }
}

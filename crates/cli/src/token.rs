//! Where an access token comes from: `--token-file PATH` (preferred),
//! the `XSTORE_TOKEN` environment variable, or `--token` on the command
//! line — which every user of the machine can read in the process list,
//! so it is accepted with a warning.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

/// Longest token file read, in bytes: a token is at most 1 KiB
/// ([`fabric::wire::MAX_TOKEN`]); a larger file is not a token file.
const MAX_TOKEN_FILE: u64 = 4096;

/// The token options every command that talks to (or is) a server takes.
#[derive(Args, Debug, Clone, Default)]
pub struct TokenArgs {
    /// Access token. Prefer --token-file or XSTORE_TOKEN: a token given
    /// here is visible to every user in the process list.
    #[arg(long, env = "XSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the access token from FILE (its first line; the file should be
    /// readable by its owner only).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The token, if any: from the file, else from `--token` or the
    /// environment. Warns when it was typed on the command line or the
    /// file is readable by others.
    pub fn resolve(&self) -> Result<Option<String>> {
        if let Some(path) = &self.token_file {
            return read_token_file(path).map(Some);
        }
        if self.token.is_some() && given_on_command_line() {
            tracing::warn!(
                "--token is visible to every user in the process list; use --token-file or XSTORE_TOKEN"
            );
        }
        Ok(self.token.clone())
    }
}

/// Whether `--token` itself (not the environment) supplied the token.
fn given_on_command_line() -> bool {
    std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == "--token" || a.starts_with("--token=")
    })
}

fn read_token_file(path: &Path) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening the token file {}", path.display()))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("the token file {} is not a regular file", path.display());
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            "the token file is readable by other users; chmod 600 it"
        );
    }
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the token file {} (UTF-8 text)", path.display()))?;
    if text.len() as u64 > MAX_TOKEN_FILE {
        bail!(
            "the token file {} is larger than {MAX_TOKEN_FILE} bytes",
            path.display()
        );
    }
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    if token.len() > fabric::wire::MAX_TOKEN {
        bail!(
            "the token in {} is longer than {} bytes",
            path.display(),
            fabric::wire::MAX_TOKEN
        );
    }
    Ok(token.to_string())
}

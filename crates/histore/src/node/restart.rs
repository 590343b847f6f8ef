//! An index server process that keeps its log on disk (`--data-dir`):
//! what its directory holds decides how it starts (docs/histore.md,
//! "Durability").
//!
//! * **Nothing** (a fresh directory): as a process without a log — a
//!   founding member if the group has no view, else a replacement that
//!   joins.
//! * **A complete state, and the view names it a backup**: it starts as
//!   that backup with its recovered sorted index, epoch and seq. If the
//!   primary is alive it joins it again (its log may have missed entries
//!   while it was down; a join resets it from a snapshot). If the primary
//!   is gone — the whole group was down — it takes part in the failover
//!   like any backup: every entry acknowledged was on the disk of every
//!   backup in the replica set (`sync`), so the longest recovered log holds
//!   them all.
//! * **The view names it the primary** (with or without a log): a primary
//!   does not log (its backups hold what it acknowledged), so its state is
//!   not used. It registers only once the view names another primary (its
//!   old lease must lapse for the backups to fail over), then joins.
//! * **Anything else** (not in the view, or a reset whose snapshot was
//!   never installed): the state is not used; it joins, and the join's
//!   PREPARE resets its log.
//! * **No view in etcd but a state on disk**: refused — the directory
//!   belongs to a group etcd no longer knows, and starting empty would
//!   hide that.

use std::sync::Arc;

use fabric::Endpoint;

use crate::durable::{IndexLog, LogConfig, RecoveredIndex};
use crate::error::HiError;
use crate::server::IndexServer;
use crate::view::GroupView;

use super::IndexNodeConfig;

/// How a server with a log starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Restart {
    /// No state on disk (or no log at all).
    Fresh,
    /// A backup with its recovered state: rejoin a live primary, or fail
    /// over with the others if the primary is gone.
    Backup,
    /// The view's primary: wait until another one is named, then join.
    WasPrimary,
    /// The state is not used: join.
    Rejoin,
}

/// Opens the log of `config` (if it keeps one), decides how the server
/// starts, creates it and hands it the log.
pub(crate) fn start_server(
    config: &IndexNodeConfig,
    view: Option<&GroupView>,
    reader: Box<dyn Endpoint>,
) -> Result<(Arc<IndexServer>, Restart), HiError> {
    let joining = view.is_some();
    let Some(lc) = &config.log else {
        let server = IndexServer::new_backup(config.node, 0, 0, config.partitions, joining, reader);
        // With or without a log, a primary's state is not used: a
        // restarted one must not look alive before it is replaced.
        let restart = if view.is_some_and(|v| v.primary == config.node) {
            Restart::WasPrimary
        } else {
            Restart::Fresh
        };
        return Ok((server, restart));
    };
    let (log, rec) = IndexLog::open(lc)?;
    let log = Arc::new(log);
    let restart = decide(config, lc, view, &rec)?;
    tracing::info!(dir = %lc.dir.display(), ?restart, epoch = rec.epoch, seq = rec.last_seq,
        keys = rec.pairs.len(), complete = rec.complete, "index log recovered");
    let server = match (restart, view) {
        (Restart::Backup, Some(v)) => {
            let s = IndexServer::new_backup(
                config.node,
                rec.epoch,
                rec.last_seq,
                config.partitions,
                true,
                reader,
            );
            // Before the log is kept: the state came from it.
            s.install(rec.pairs, (v.primary, v.table))?;
            s
        }
        _ => IndexServer::new_backup(config.node, 0, 0, config.partitions, joining, reader),
    };
    server.keep_log(log)?;
    Ok((server, restart))
}

fn decide(
    config: &IndexNodeConfig,
    lc: &LogConfig,
    view: Option<&GroupView>,
    rec: &RecoveredIndex,
) -> Result<Restart, HiError> {
    let me = config.node;
    // A primary logs nothing, so its directory may be empty: the view,
    // not the disk, says it was the primary.
    if view.is_some_and(|v| v.primary == me) {
        return Ok(Restart::WasPrimary);
    }
    if !rec.existed {
        return Ok(Restart::Fresh);
    }
    let Some(view) = view else {
        return Err(HiError::Config(format!(
            "{} holds index server state (epoch {}, seq {}) but etcd has no view of group {}: \
             refusing to start empty over it (move the directory away to start fresh)",
            lc.dir.display(),
            rec.epoch,
            rec.last_seq,
            config.group
        )));
    };
    Ok(if view.backups.contains(&me) && rec.complete {
        Restart::Backup
    } else {
        Restart::Rejoin
    })
}

//! The table of systems the bench, the shell and the server dispatch
//! from: each system crate exports its [`SystemDesc`]s (`systems()`), and
//! this crate concatenates them, one line per crate. Adding a system is
//! its crate and one line here.
//!
//! This is also where the suites' default line-ups are written down: the
//! only place outside the system crates that spells system names.

#![forbid(unsafe_code)]

pub use coord::deploy::Deployment;
pub use kv::SystemDesc;

/// Each system crate's table, in listing order (which is also the order
/// plots and `--list-systems` show them). One line per system crate.
const TABLES: &[fn() -> &'static [SystemDesc]] = &[
    xstore::kv::systems,
    xstore::bytes::kv::systems,
    rolex::kv::systems,
    histore::kv::systems,
    finestore::kv::systems,
    sherman::kv::systems,
    single::systems,
];

fn tables() -> impl Iterator<Item = &'static [SystemDesc]> {
    TABLES.iter().map(|table| table())
}

/// Every system, in listing order.
pub fn all() -> Vec<&'static SystemDesc> {
    tables().flatten().collect()
}

/// The system called `name`.
pub fn find(name: &str) -> Option<&'static SystemDesc> {
    tables().flatten().find(|d| d.name == name)
}

/// Every system's name, in listing order.
pub fn names() -> Vec<&'static str> {
    all().into_iter().map(|d| d.name).collect()
}

/// Each crate that can deploy a multi-process cluster on this machine
/// (`xstore cluster up --system NAME`), in listing order; the first is
/// the default. One line per crate.
const DEPLOYMENTS: &[Deployment] = &[
    cluster::up::DEPLOYMENT,
    histore::up::DEPLOYMENT,
    cluster::up::FINESTORE_DEPLOYMENT,
];

/// Every deployment `xstore cluster up` can start, the default first.
pub fn deployments() -> &'static [Deployment] {
    DEPLOYMENTS
}

/// The deployment of system `name`.
pub fn find_deployment(name: &str) -> Option<&'static Deployment> {
    DEPLOYMENTS.iter().find(|d| d.name == name)
}

/// The deployment `cluster up` starts when given no `--system`.
pub fn default_deployment() -> &'static Deployment {
    &DEPLOYMENTS[0]
}

/// The systems a suite runs when the user names none. `all` is every
/// distributed design the bench has always compared (not the
/// single-machine `index:` peers); `project` is what `--suite project`
/// sweeps; `cache` the designs the cache suite varies (XStore's cache
/// modes, tree-cache's budgets). Unknown suites get `all`.
///
/// A few line-ups name one system for a role rather than a suite:
/// `default` (what `--system` means when not given), `memory` (the
/// designs the memory suite varies, in figure order), `cluster` (the
/// design a sharded cluster runs), `one-server-core` (designs projected
/// with one memory-node core: ROLEX's XStore-D), `paper-histore` (HiStore
/// and its four baselines, §5.1), `finestore-variants` (FineStore and its
/// Fig. 20/21 variants).
pub fn lineup(suite: &str) -> Vec<&'static str> {
    match suite {
        "default" | "cluster" => vec!["xstore"],
        "memory" => vec!["xstore", "tree-cache"],
        // FineStore's Fig. 20/21: the pipelined scheme, purely
        // on-server, and without the extended RCU barrier (locks).
        "finestore-variants" => vec!["finestore", "finestore-server", "finestore-locks"],
        "one-server-core" => vec!["xstore-d"],
        // HiStore's evaluation (§5.1-5.4): HiStore and its four baselines.
        "paper-histore" => vec![
            "histore",
            "all-hashtable",
            "all-skiplist",
            "single-hashtable",
            "single-skiplist",
        ],
        "project" => vec![
            "xstore",
            "server-centric",
            "tree-cache",
            "whole-tree-cache",
            "rolex",
            "finestore",
            "xstore-d",
        ],
        _ => vec![
            "xstore",
            "server-centric",
            "tree-cache",
            "whole-tree-cache",
            "rolex",
            "histore",
            "finestore",
            "xstore-d",
            "sherman",
            "fg",
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let names = names();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate names in {names:?}");
        for n in names {
            assert_eq!(find(n).map(|d| d.name), Some(n));
        }
        assert!(find("no-such-system").is_none());
    }

    #[test]
    fn the_histore_lineup_names_registered_systems() {
        let lineup = lineup("paper-histore");
        assert_eq!(lineup.len(), 5);
        for n in lineup {
            assert!(find(n).is_some(), "{n} is not registered");
        }
    }

    #[test]
    fn the_finestore_variants_are_registered() {
        for n in lineup("finestore-variants") {
            assert!(find(n).is_some(), "{n} is not registered");
        }
    }

    #[test]
    fn deployments_are_unique_documented_systems() {
        let names: Vec<&str> = deployments().iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate names in {names:?}");
        for d in deployments() {
            assert!(!d.about.is_empty(), "{} has no about line", d.name);
            // A deployment runs servers of a system the table knows.
            assert!(find(d.name).is_some(), "{} is no system", d.name);
            assert_eq!(find_deployment(d.name).map(|f| f.name), Some(d.name));
        }
        assert_eq!(default_deployment().name, lineup("cluster")[0]);
        assert!(find_deployment("no-such-system").is_none());
    }

    #[test]
    fn every_system_documents_its_options() {
        for d in all() {
            assert!(!d.about.is_empty(), "{} has no about line", d.name);
            for o in d.options {
                assert!(
                    !o.name.is_empty() && !o.help.is_empty(),
                    "{}: {o:?}",
                    d.name
                );
            }
        }
    }
}

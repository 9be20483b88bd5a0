//! Network faults between nodes on one loopback: nftables rules in a table of this run that
//! drop the packets a node's sockets send to another node's listening ports, matched by the
//! socket's group id (each node runs under its own, [`crate::cluster::node_gid`]).
//!
//! A cut `from → to` stops every connection `from` opens to `to` (requests and their ACKs are
//! dropped; retransmissions time out) while `to` can still reach `from`: a one-way cut. Both
//! directions make a partition. The workloads run with the driver's own group id and reach
//! every node throughout: the brokers are partitioned from each other, not from clients.
//!
//! Requires root (CAP_NET_ADMIN) and the `nft` tool. The table is removed on drop.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cluster::node_gid;

pub struct Net {
    table: String,
    /// Each node's listening ports.
    ports: BTreeMap<i32, Vec<u16>>,
    cuts: BTreeSet<(i32, i32)>,
}

fn nft(args: &str) -> Result<()> {
    let out = Command::new("nft")
        .args(args.split(' '))
        .output()
        .context("run nft (apt-get install nftables)")?;
    if !out.status.success() {
        bail!("nft {args}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

impl Net {
    /// Creates this run's table with an output chain and no rules.
    pub fn new(ports: BTreeMap<i32, Vec<u16>>) -> Result<Net> {
        remove_stale_tables();
        let table = format!("kafkaiq_faults_{}", std::process::id());
        nft(&format!("add table inet {table}"))?;
        let net = Net {
            table,
            ports,
            cuts: BTreeSet::new(),
        };
        nft(&format!(
            "add chain inet {} out {{ type filter hook output priority 0 ; policy accept ; }}",
            net.table
        ))?;
        Ok(net)
    }

    /// Drops what `from` sends to `to`'s ports.
    pub fn cut(&mut self, from: i32, to: i32) -> Result<()> {
        if self.cuts.insert((from, to)) {
            self.apply()?;
        }
        Ok(())
    }

    /// Cuts both directions between `a` and `b`.
    pub fn partition(&mut self, a: i32, b: i32) -> Result<()> {
        self.cuts.insert((a, b));
        self.cuts.insert((b, a));
        self.apply()
    }

    /// Removes every cut.
    pub fn heal(&mut self) -> Result<()> {
        if !self.cuts.is_empty() {
            self.cuts.clear();
            self.apply()?;
        }
        Ok(())
    }

    fn apply(&self) -> Result<()> {
        nft(&format!("flush chain inet {} out", self.table))?;
        for (from, to) in &self.cuts {
            let ports: Vec<String> = self.ports[to].iter().map(|p| p.to_string()).collect();
            nft(&format!(
                "add rule inet {} out meta skgid {} tcp dport {{ {} }} drop",
                self.table,
                node_gid(*from),
                ports.join(" , ")
            ))?;
        }
        Ok(())
    }
}

/// Deletes the tables of earlier runs whose driver is gone (killed before its drop ran).
fn remove_stale_tables() {
    let Ok(out) = Command::new("nft").args(["list", "tables"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.strip_prefix("table inet ") else {
            continue;
        };
        let Some(pid) = name.strip_prefix("kafkaiq_faults_") else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = nft(&format!("delete table inet {name}"));
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = nft(&format!("delete table inet {}", self.table));
    }
}

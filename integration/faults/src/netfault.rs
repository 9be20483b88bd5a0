//! Network faults between nodes on one loopback: nftables rules in a table of this run that
//! drop the packets a node's sockets send to another node's listening ports, matched by the
//! socket's group id (each node runs under its own, [`crate::cluster::node_gid`]).
//!
//! A cut `from → to` stops every connection `from` opens to `to` (requests and their ACKs are
//! dropped; retransmissions time out) while `to` can still reach `from`: a one-way cut. Both
//! directions make a partition. The workloads run with the driver's own group id and reach
//! every node throughout: the brokers are partitioned from each other, not from clients.
//!
//! Added latency on a link `from → to` uses the same match (the sender's group id, the
//! receiver's ports) in an iptables chain of this run whose rules hand the packets to an
//! NFQUEUE that [`crate::delay`] serves: every request one node sends the other waits the delay
//! before it leaves (the answers do not), so each round trip on that link takes that much
//! longer. The rules carry `--queue-bypass`: with nobody serving the queue (the driver gone)
//! packets pass, so a latency fault cannot outlive its driver. (nftables' own `queue`
//! statement is not built into these kernels; its compatibility layer runs the iptables
//! target.)
//!
//! Requires root (CAP_NET_ADMIN) and the `nft` tool, and `iptables` for latency. The table and
//! the chain are removed on drop.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cluster::node_gid;
use crate::delay::Delayer;

pub struct Net {
    table: String,
    /// Each node's listening ports.
    ports: BTreeMap<i32, Vec<u16>>,
    cuts: BTreeSet<(i32, i32)>,
    /// The iptables chain of this run's latency rules, once made.
    chain: Option<String>,
    /// The queue serving the latency rules while a delay is on.
    delayer: Option<Delayer>,
}

fn iptables(args: &[&str]) -> Result<String> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .context("run iptables (apt-get install iptables)")?;
    if !out.status.success() {
        bail!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The NFQUEUE number of this run: one per driver process.
fn queue_number() -> u16 {
    1000 + (std::process::id() % 60_000) as u16
}

const CHAIN_PREFIX: &str = "KIQFAULTS";

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
            chain: None,
            delayer: None,
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

    /// Delays every packet `from` sends to `to`'s ports by `delay`, for each `(from, to)` of
    /// `links`, until [`Net::undelay`].
    pub fn delay(&mut self, links: &[(i32, i32)], delay: Duration) -> Result<()> {
        self.undelay()?;
        let chain = match &self.chain {
            Some(c) => c.clone(),
            None => {
                remove_stale_chains();
                let c = format!("{CHAIN_PREFIX}{}", std::process::id());
                iptables(&["-N", &c])?;
                iptables(&["-I", "OUTPUT", "-j", &c])?;
                self.chain = Some(c.clone());
                c
            }
        };
        self.delayer = Some(Delayer::start(queue_number(), delay)?);
        let queue = queue_number().to_string();
        for (from, to) in links {
            let gid = node_gid(*from).to_string();
            let ports: Vec<String> = self.ports[to].iter().map(|p| p.to_string()).collect();
            let ports = ports.join(",");
            iptables(&[
                "-A",
                &chain,
                "-p",
                "tcp",
                "-m",
                "owner",
                "--gid-owner",
                &gid,
                "-m",
                "multiport",
                "--dports",
                &ports,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue,
                "--queue-bypass",
            ])?;
        }
        Ok(())
    }

    /// Removes the latency rules and lets what they queued through (on time).
    pub fn undelay(&mut self) -> Result<()> {
        if let Some(c) = &self.chain {
            iptables(&["-F", c])?;
        }
        if let Some(d) = self.delayer.take() {
            println!("faults: {} packets delayed", d.stop());
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

/// Deletes the latency chains of earlier runs whose driver is gone.
fn remove_stale_chains() {
    let Ok(rules) = iptables(&["-S", "OUTPUT"]) else {
        return;
    };
    for line in rules.lines() {
        let Some(chain) = line.strip_prefix("-A OUTPUT -j ") else {
            continue;
        };
        let Some(pid) = chain.strip_prefix(CHAIN_PREFIX) else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            delete_chain(chain);
        }
    }
}

fn delete_chain(chain: &str) {
    let _ = iptables(&["-D", "OUTPUT", "-j", chain]);
    let _ = iptables(&["-F", chain]);
    let _ = iptables(&["-X", chain]);
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = nft(&format!("delete table inet {}", self.table));
        let _ = self.undelay();
        if let Some(c) = self.chain.take() {
            delete_chain(&c);
        }
    }
}

//! Connections per client address, Kafka's `max.connections.per.ip` (and its overrides): one
//! host cannot hold every slot of the broker. The client listeners together count the
//! connections each address holds open; a new one past the address's maximum is closed at once,
//! as Kafka's `ConnectionQuotas` does (the controller listener counts apart).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::config::ConnectionsPerIp;

/// The open connections of the client listeners (or of the controller listener), per client
/// address.
#[derive(Debug)]
pub struct PerIpSlots {
    limits: ConnectionsPerIp,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its address's count, given back when dropped.
#[derive(Debug)]
pub struct IpSlot {
    slots: Arc<PerIpSlots>,
    ip: IpAddr,
}

impl PerIpSlots {
    pub fn new(limits: ConnectionsPerIp) -> Arc<PerIpSlots> {
        Arc::new(PerIpSlots {
            limits,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a new connection from `ip`, or `Err(maximum)` when `ip` already holds its
    /// maximum.
    pub fn try_take(self: &Arc<Self>, ip: IpAddr) -> Result<IpSlot, usize> {
        let ip = ip.to_canonical();
        let max = self.limits.max_for(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= max {
            if *count == 0 {
                open.remove(&ip);
            }
            return Err(max);
        }
        *count += 1;
        Ok(IpSlot {
            slots: self.clone(),
            ip,
        })
    }

    /// Connections `ip` holds open.
    pub fn open(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn an_address_holds_at_most_its_maximum_and_gets_slots_back() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let slots = PerIpSlots::new(ConnectionsPerIp {
            default_max: 2,
            overrides: BTreeMap::from([(b, 0)]),
        });
        let first = slots.try_take(a).unwrap();
        let _second = slots.try_take("::ffff:10.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(slots.try_take(a).unwrap_err(), 2);
        assert_eq!(slots.try_take(b).unwrap_err(), 0);
        assert_eq!(slots.open(b), 0);
        drop(first);
        assert_eq!(slots.open(a), 1);
        let _third = slots.try_take(a).unwrap();
        assert_eq!(slots.open(a), 2);
    }
}

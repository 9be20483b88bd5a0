//! The TLS acceptor of a client or controller listener, which follows the listener's dynamic key and trust
//! stores (`listener.name.<l>.ssl.keystore.*` / `.ssl.truststore.*`, per broker, in the
//! metadata log; [`crate::config::dynamic`]). Asked at each accept: a handshake uses the stores
//! current when its connection arrived, and an established connection keeps the ones it was
//! made with, as Kafka's `SslFactory` reconfiguration does.
//!
//! The acceptor changes only when those values do (in the effective broker config the replica
//! manager lays over `server.properties` at each image), not at any other change of the
//! effective config, so a store file rewritten in place is taken up only through a change.

use std::collections::BTreeMap;

use tokio_rustls::TlsAcceptor;

use crate::config::dynamic;
use crate::config::security::ListenerSecurity;
use crate::replica::ReplicaManager;

pub struct ListenerTls {
    /// `listener.name.<l>.`, lower case.
    prefix: String,
    /// The listener's dynamic SSL values the acceptor was made from.
    seen: BTreeMap<String, String>,
    acceptor: Option<TlsAcceptor>,
}

impl ListenerTls {
    /// For the listener `name` as `server.properties` secures it.
    pub fn new(name: &str, security: &ListenerSecurity) -> ListenerTls {
        ListenerTls {
            prefix: format!("listener.name.{}.", name.to_ascii_lowercase()),
            seen: BTreeMap::new(),
            acceptor: security.tls.clone().map(TlsAcceptor::from),
        }
    }

    /// The acceptor for a connection accepted now.
    pub fn current(&mut self, replicas: &ReplicaManager) -> Option<TlsAcceptor> {
        self.acceptor.as_ref()?;
        let config = replicas.effective_config();
        let values: BTreeMap<String, String> = config
            .dynamic
            .iter()
            .filter(|(k, _)| k.starts_with(&self.prefix) && dynamic::listener_ssl_key(k).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if values != self.seen {
            let named = |name: &str| format!("listener.name.{}.", name.to_ascii_lowercase());
            let served = config
                .client_listeners
                .iter()
                .find(|l| named(&l.listener.name) == self.prefix)
                .map(|l| &l.security)
                .or_else(|| {
                    // The controller listener (served by a node with the controller role).
                    let controller = config.kraft.controller_listener()?;
                    (named(&controller.name) == self.prefix)
                        .then_some(config.controller_listener_security.as_ref()?)
                })
                .and_then(|security| security.tls.clone());
            if let Some(tls) = served {
                tracing::info!(
                    listener = %self.prefix.trim_start_matches("listener.name.").trim_end_matches('.'),
                    keys = ?values.keys().collect::<Vec<_>>(),
                    "new TLS connections use the listener's reconfigured key and trust stores"
                );
                self.acceptor = Some(TlsAcceptor::from(tls));
            }
            self.seen = values;
        }
        self.acceptor.clone()
    }
}

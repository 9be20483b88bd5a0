//! Added latency without a delaying qdisc: packets are handed to this process through an
//! NFQUEUE (an `iptables ... -j NFQUEUE --queue-bypass` rule, see [`crate::netfault`]) and each
//! is let through once it has waited the delay. Only the verdict is exchanged (metadata copy
//! mode): the payload never leaves the kernel.
//!
//! Why not `tc netem`: the kernels these runs see (CI and the shared machines) are built
//! without `sch_netem` (and without `prio`, `fw`, `fq`), so a delay has to come from user
//! space. The queue heals by itself: when this process goes away its netlink socket closes,
//! the kernel forgets the queue and `--queue-bypass` lets every packet through again; when the
//! queue overflows, the fail-open flag does the same instead of dropping.
//!
//! The protocol (nfnetlink_queue, `linux/netfilter/nfnetlink_queue.h`): one netlink socket of
//! family NETLINK_NETFILTER bound to queue `n`; the kernel sends a `NFQNL_MSG_PACKET` per
//! queued packet with its id; a `NFQNL_MSG_VERDICT_BATCH` accepts every id up to the one it
//! names. Ids grow in queue order and every packet waits the same delay, so one batch verdict
//! releases everything that is due.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = 3;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_META: u8 = 1;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NF_ACCEPT: u32 = 1;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
/// How many packets the kernel holds for the queue before failing open.
const QUEUE_MAXLEN: u32 = 65_536;
/// How often the delaying thread looks for packets that are due.
const TICK_MS: libc::c_int = 2;

/// A netlink message: header, nfgenmsg for `queue`, then the attributes.
fn message(kind: u16, flags: u16, seq: u32, queue: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    m.extend_from_slice(&queue.to_be_bytes());
    for (t, payload) in attrs {
        let len = 4 + payload.len();
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&t.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(m.len().next_multiple_of(4), 0);
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | kind).to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m
}

struct Socket(libc::c_int);

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

impl Socket {
    fn open() -> Result<Socket> {
        // SAFETY: plain socket calls on a descriptor this function owns.
        unsafe {
            let fd = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_NETFILTER);
            if fd < 0 {
                bail!(
                    "netlink socket: {} (needs root)",
                    std::io::Error::last_os_error()
                );
            }
            let s = Socket(fd);
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            if libc::bind(
                fd,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            ) < 0
            {
                bail!("netlink bind: {}", std::io::Error::last_os_error());
            }
            let size: libc::c_int = 8 << 20;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &size as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
            Ok(s)
        }
    }

    fn send(&self, m: &[u8]) -> Result<()> {
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `m` and `addr` outlive the call.
        let n = unsafe {
            libc::sendto(
                self.0,
                m.as_ptr() as *const libc::c_void,
                m.len(),
                0,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if n < 0 {
            bail!("netlink send: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` for a datagram; its length (0 when none came).
    fn recv(&self, buf: &mut [u8], timeout_ms: libc::c_int) -> usize {
        let mut pfd = libc::pollfd {
            fd: self.0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, a buffer we own.
        unsafe {
            if libc::poll(&mut pfd, 1, timeout_ms) <= 0 {
                return 0;
            }
            let n = libc::recv(
                self.0,
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT,
            );
            // ENOBUFS (messages lost to a full buffer) is not fatal: the packets they named are
            // released by the next batch verdict with a higher id.
            n.max(0) as usize
        }
    }

    /// Sends a configuration message and waits for the kernel's acknowledgement.
    fn configure(&self, seq: u32, queue: u16, attrs: &[(u16, Vec<u8>)]) -> Result<()> {
        self.send(&message(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue, attrs))?;
        let mut buf = vec![0u8; 8192];
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            let n = self.recv(&mut buf, 100);
            for (kind, body) in messages(&buf[..n]) {
                if kind == NLMSG_ERROR && body.len() >= 4 {
                    let errno = i32::from_ne_bytes(body[0..4].try_into().unwrap());
                    if errno == 0 {
                        return Ok(());
                    }
                    bail!(
                        "nfqueue {queue}: configuration refused: {}",
                        std::io::Error::from_raw_os_error(-errno)
                    );
                }
            }
        }
        bail!("nfqueue {queue}: no answer to a configuration message")
    }
}

/// The (type, payload after the netlink header) of each message in a datagram.
fn messages(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 16 {
        let len = u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize;
        if len < 16 || len > buf.len() {
            break;
        }
        let kind = u16::from_ne_bytes(buf[4..6].try_into().unwrap());
        out.push((kind, &buf[16..len]));
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
    out
}

/// The packet id of a `NFQNL_MSG_PACKET` body (nfgenmsg, then attributes).
fn packet_id(body: &[u8]) -> Option<u32> {
    let mut a = body.get(4..)?;
    while a.len() >= 4 {
        let len = u16::from_ne_bytes([a[0], a[1]]) as usize;
        let kind = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
        if len < 4 || len > a.len() {
            return None;
        }
        if kind == NFQA_PACKET_HDR && len >= 8 {
            return Some(u32::from_be_bytes(a[4..8].try_into().unwrap()));
        }
        a = &a[len.next_multiple_of(4).min(a.len())..];
    }
    None
}

/// A queue being served: every packet it receives is accepted `delay` after it arrived.
pub struct Delayer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<u64>>,
}

impl Delayer {
    /// Binds queue `queue` (fail-open, metadata only) and starts delaying what reaches it.
    pub fn start(queue: u16, delay: Duration) -> Result<Delayer> {
        let sock = Socket::open()?;
        sock.configure(
            1,
            queue,
            &[(NFQA_CFG_CMD, vec![NFQNL_CFG_CMD_BIND, 0, 0, 0])],
        )?;
        let mut params = 0u32.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_META);
        sock.configure(2, queue, &[(NFQA_CFG_PARAMS, params)])?;
        sock.configure(
            3,
            queue,
            &[(NFQA_CFG_QUEUE_MAXLEN, QUEUE_MAXLEN.to_be_bytes().to_vec())],
        )?;
        sock.configure(
            4,
            queue,
            &[
                (NFQA_CFG_MASK, NFQA_CFG_F_FAIL_OPEN.to_be_bytes().to_vec()),
                (NFQA_CFG_FLAGS, NFQA_CFG_F_FAIL_OPEN.to_be_bytes().to_vec()),
            ],
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("delay-{queue}"))
            .spawn(move || serve(sock, queue, delay, &flag))?;
        Ok(Delayer {
            stop,
            handle: Some(handle),
        })
    }

    /// Releases what is still queued (on time) and unbinds; how many packets were delayed.
    /// The rules sending packets here must be gone first, or the queue never empties.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().map_or(0, |h| h.join().unwrap_or(0))
    }
}

impl Drop for Delayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(sock: Socket, queue: u16, delay: Duration, stop: &AtomicBool) -> u64 {
    let mut pending: VecDeque<(Instant, u32)> = VecDeque::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0u64;
    let mut quiet_since: Option<Instant> = None;
    loop {
        let n = sock.recv(&mut buf, TICK_MS);
        let now = Instant::now();
        for (kind, body) in messages(&buf[..n]) {
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
                if let Some(id) = packet_id(body) {
                    pending.push_back((now + delay, id));
                    seen += 1;
                }
            }
        }
        let mut due = None;
        while pending.front().is_some_and(|(at, _)| *at <= now) {
            due = pending.pop_front().map(|(_, id)| id);
        }
        if let Some(id) = due {
            let mut verdict = NF_ACCEPT.to_be_bytes().to_vec();
            verdict.extend_from_slice(&id.to_be_bytes());
            let _ = sock.send(&message(
                NFQNL_MSG_VERDICT_BATCH,
                0,
                0,
                queue,
                &[(NFQA_VERDICT_HDR, verdict)],
            ));
        }
        if stop.load(Ordering::SeqCst) {
            // Drained once nothing is pending and nothing new came for a moment; closing the
            // socket earlier would make the kernel drop what it still holds.
            if pending.is_empty() && n == 0 {
                let since = *quiet_since.get_or_insert(now);
                if now - since > Duration::from_millis(50) {
                    return seen;
                }
            } else {
                quiet_since = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_padded_and_sized() {
        let m = message(
            NFQNL_MSG_CONFIG,
            NLM_F_ACK,
            7,
            513,
            &[(NFQA_CFG_PARAMS, vec![0, 0, 0, 0, 1])],
        );
        // 16 header + 4 nfgenmsg + 4 attribute header + 5 payload, padded to 4.
        assert_eq!(m.len(), 32);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x302);
        assert_eq!(&m[18..20], &513u16.to_be_bytes());
        assert_eq!(u16::from_ne_bytes([m[20], m[21]]), 9);
        let parsed = messages(&m);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].0, 0x302);
    }

    #[test]
    fn packet_ids_are_read_from_the_header_attribute() {
        let mut hdr = 42u32.to_be_bytes().to_vec();
        hdr.extend_from_slice(&[0x08, 0x00, 3]);
        let m = message(
            NFQNL_MSG_PACKET,
            0,
            0,
            1,
            &[(9, vec![1, 2, 3, 4]), (NFQA_PACKET_HDR, hdr)],
        );
        let parsed = messages(&m);
        assert_eq!(packet_id(parsed[0].1), Some(42));
    }
}

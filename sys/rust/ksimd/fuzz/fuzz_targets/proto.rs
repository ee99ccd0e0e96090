//! ksimd's protocol decoder over arbitrary packets: decoding never
//! panics, and a packet that decodes, as a request or as a reply, is
//! exactly the packet that its value encodes. Each message has one
//! encoding (fixed-width little-endian integers, lengths that must match
//! what follows, flags that must be 0 or 1, text that must be UTF-8,
//! nothing after the last field), so encode(decode(x)) == x holds for
//! every field of every kind.
#![no_main]

use ksimd::proto::{Reply, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|packet: &[u8]| {
    let request = Request::decode(packet);
    if let Ok(r) = &request {
        assert_eq!(r.encode(), packet, "request {r:?}");
    }
    let reply = Reply::decode(packet);
    if let Ok(r) = &reply {
        assert_eq!(r.encode(), packet, "reply {r:?}");
    }
    // Requests and replies have kinds of their own: no packet is both.
    assert!(request.is_err() || reply.is_err());
});

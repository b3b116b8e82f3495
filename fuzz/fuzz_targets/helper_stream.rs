//! What the sandbox helper sends the hub, as the hub reads it (`hunkgate_sandbox::wire`): the
//! answer to `prepare` (a JSON header and a binary record table) and the frames of a
//! snapshot; also a request, as the helper reads it. The helper runs as the sandbox user, which
//! the agent controls, so all of it is hostile data.
//!
//! Properties: no panic, no allocation sized by a length or count the bytes claim (libFuzzer's
//! `-rss_limit_mb` fails a run that tries); whatever decodes re-encodes and decodes to the same
//! value.
#![no_main]

use hunkgate_sandbox::wire::{
    read_frame, read_prepare_reply, read_request, write_frame, write_prepare_reply, write_request,
    Frame,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = read_prepare_reply(&mut &data[..]) {
        let mut again = Vec::new();
        write_prepare_reply(&mut again, &reply).expect("re-encoding a decoded answer");
        let back = read_prepare_reply(&mut &again[..]).expect("decoding a re-encoded answer");
        assert_eq!(back, reply);
    }
    if let Ok(req) = read_request(&mut &data[..]) {
        let mut again = Vec::new();
        write_request(&mut again, &req).expect("re-encoding a decoded request");
        let back = read_request(&mut &again[..]).expect("decoding a re-encoded request");
        assert_eq!(back.base, req.base);
        assert_eq!(back.record, req.record);
    }
    // A snapshot stream: frames until the end frame or an error, file payloads capped as the
    // hub caps them.
    let mut r = data;
    let mut frames = Vec::new();
    while let Ok(frame) = read_frame(&mut r, 1 << 20) {
        let end = frame == Frame::End;
        frames.push(frame);
        if end || frames.len() > 10_000 {
            break;
        }
    }
    let mut again = Vec::new();
    for f in &frames {
        write_frame(&mut again, f).expect("re-encoding a decoded frame");
    }
    let mut r = &again[..];
    for f in &frames {
        assert_eq!(&read_frame(&mut r, 1 << 20).expect("a re-encoded frame"), f);
    }
});

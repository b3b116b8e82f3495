use super::*;

/// Stored zlib streams inflate back to their bytes, whatever their length (empty, one
/// block, exactly a block, several blocks and a partial one).
#[test]
fn stored_zlib_streams_inflate_to_their_bytes() {
    use std::io::Read as _;
    for len in [0usize, 1, 100, 65_535, 65_536, 200_000] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut stream = Vec::new();
        stored_zlib(&bytes, &mut stream);
        let mut back = Vec::new();
        flate2::read::ZlibDecoder::new(&stream[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, bytes, "length {len}");
        // The stream is the whole input: nothing after the Adler-32.
        let mut d = flate2::Decompress::new(true);
        let mut sink = vec![0u8; len + 1];
        let status = d
            .decompress(&stream, &mut sink, flate2::FlushDecompress::Finish)
            .unwrap();
        assert_eq!(status, flate2::Status::StreamEnd, "length {len}");
        assert_eq!(d.total_in() as usize, stream.len(), "length {len}");
    }
}

#[test]
fn entry_headers_are_gits_varint() {
    // Type 3, size 5: one byte. Size 16 needs a second byte (16 >> 4 = 1).
    assert_eq!(entry_header(3, 5), vec![0x35]);
    assert_eq!(entry_header(3, 16), vec![0xb0, 0x01]);
    assert_eq!(entry_header(3, 0x7ff), vec![0xbf, 0x7f]);
    assert_eq!(entry_header(3, 0x800), vec![0xb0, 0x80, 0x01]);
}

#[test]
fn large_offsets_go_to_the_64_bit_table() {
    let a = ObjectId::from_hex(b"0000000000000000000000000000000000000001").unwrap();
    let b = ObjectId::from_hex(b"ff00000000000000000000000000000000000002").unwrap();
    let mut entries = vec![(b, 5u64 << 32, 7), (a, 12, 9)];
    let idx = index_v2(&mut entries, ObjectId::null(gix::hash::Kind::Sha1)).unwrap();
    let offsets_at = 8 + 1024 + 2 * 20 + 2 * 4;
    let word = |at: usize| u32::from_be_bytes(idx[at..at + 4].try_into().unwrap());
    assert_eq!(
        word(8 + 4 * 255),
        2,
        "the last fan-out entry counts every object"
    );
    assert_eq!(word(offsets_at), 12);
    assert_eq!(word(offsets_at + 4), 0x8000_0000);
    let big = u64::from_be_bytes(idx[offsets_at + 8..offsets_at + 16].try_into().unwrap());
    assert_eq!(big, 5 << 32);
    assert_eq!(idx.len(), offsets_at + 8 + 8 + 40);
}

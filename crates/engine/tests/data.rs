//! File bytes: inline and chunked storage, writes across chunk boundaries, sparse files,
//! truncation, a random-operation model test against a `Vec<u8>`, and setattr.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;

fn is_inline(inode: &Inode) -> bool {
    matches!(inode.content, Content::Inline(_))
}

fn truncate(fs: &Engine, ino: u64, size: u64) -> Inode {
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(size),
            ..sattr()
        },
    )
    .unwrap()
}

/// Writes into both the engine and the model.
fn write_both(fs: &Engine, ino: u64, model: &mut Vec<u8>, offset: u64, data: &[u8]) {
    assert_eq!(fs.write(ino, offset, data).unwrap() as usize, data.len());
    let end = offset as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[offset as usize..end].copy_from_slice(data);
}

fn truncate_both(fs: &Engine, ino: u64, model: &mut Vec<u8>, size: u64) {
    let inode = truncate(fs, ino, size);
    assert_eq!(inode.size, size);
    model.resize(size as usize, 0);
}

fn check_against(fs: &Engine, ino: u64, model: &[u8]) {
    let inode = fs.getattr(ino).unwrap();
    assert_eq!(inode.size, model.len() as u64);
    assert_eq!(read_all(fs, ino), model);
}

/// Invariants of the storage layout after every operation.
fn check_layout(inode: &Inode) {
    assert_eq!(
        is_inline(inode),
        inode.size <= INLINE_MAX,
        "layout of a {}-byte file: {:?}",
        inode.size,
        inode.content
    );
    if let Content::Inline(bytes) = &inode.content {
        assert_eq!(bytes.len() as u64, inode.size);
        assert_eq!(inode.allocated_bytes, inode.size);
    } else {
        assert!(inode.allocated_bytes <= inode.size);
    }
    assert_eq!(inode.blocks(), inode.allocated_bytes.div_ceil(512));
}

/// Random writes, truncates and reads, checked against a `Vec<u8>` after each step.
#[expect(
    clippy::too_many_lines,
    reason = "one model-checked loop: each operation kind applied to the engine and to the model side by side"
)]
fn model_test(fs: &Engine, seed: u64, ops: usize) {
    const MAX_END: u64 = 5 * CHUNK + 1234;
    let mut rng = Lcg::new(seed);
    let file = mkfile(fs, ROOT_INO, b"model");
    let mut model: Vec<u8> = Vec::new();
    let base_usage = total(fs);
    let (mut writes, mut truncates, mut reads) = (0, 0, 0);
    for step in 0..ops {
        match rng.below(100) {
            0..=49 => {
                let offset = match rng.below(4) {
                    0 => rng.below(INLINE_MAX + 200),
                    1 => (CHUNK * rng.below(5)).saturating_sub(rng.below(300)) + rng.below(300),
                    2 => rng.below(model.len() as u64 + 1),
                    _ => rng.below(MAX_END),
                };
                let len = match rng.below(10) {
                    0..=4 => rng.below(300) + 1,
                    5..=7 => rng.below(6000) + 1,
                    _ => rng.below(2 * CHUNK) + 1,
                };
                let len = len.min(MAX_END - offset.min(MAX_END - 1));
                let data = rng.bytes(len as usize);
                write_both(fs, file.ino, &mut model, offset, &data);
                writes += 1;
            }
            50..=64 => {
                let size = match rng.below(6) {
                    0 => 0,
                    1 => rng.below(INLINE_MAX + 1),
                    2 => INLINE_MAX + rng.below(2),
                    3 => (CHUNK * rng.below(5)).saturating_sub(rng.below(3)) + rng.below(3),
                    4 => rng.below(model.len() as u64 + 1),
                    _ => rng.below(MAX_END),
                };
                truncate_both(fs, file.ino, &mut model, size);
                truncates += 1;
            }
            _ => {
                let offset = rng.below(model.len() as u64 + 2000);
                let bound = if rng.chance(50) { 500 } else { 3 * CHUNK };
                let size = rng.below(bound) as u32 + 1;
                let got = fs.read(file.ino, offset, size).unwrap();
                let start = (offset as usize).min(model.len());
                let end = (offset as usize + size as usize).min(model.len());
                assert!(
                    got == model[start..end],
                    "step {step}: read({offset}, {size}) of a {}-byte file differs",
                    model.len()
                );
                reads += 1;
            }
        }
        let inode = fs.getattr(file.ino).unwrap();
        assert_eq!(inode.size, model.len() as u64, "step {step}: size");
        check_layout(&inode);
        if step % 100 == 0 {
            assert_eq!(
                total(fs).bytes,
                base_usage.bytes + inode.allocated_bytes,
                "step {step}: usage bytes"
            );
        }
    }
    assert!(writes > ops / 3 && truncates > ops / 10 && reads > ops / 5);
    check_against(fs, file.ino, &model);
    let inode = fs.getattr(file.ino).unwrap();
    assert_eq!(
        total(fs),
        Usage {
            inodes: base_usage.inodes,
            bytes: base_usage.bytes + inode.allocated_bytes
        }
    );
    assert_consistent(fs, &[]);
}

both_backends! {
    fn inline_writes_at_odd_offsets(fs) {
        let file = mkfile(fs, ROOT_INO, b"small");
        let mut model = Vec::new();
        write_both(fs, file.ino, &mut model, 0, b"hello");
        write_both(fs, file.ino, &mut model, 3, b"p me");
        write_both(fs, file.ino, &mut model, 1001, b"after a gap");
        write_both(fs, file.ino, &mut model, 4095, b"!");
        check_against(fs, file.ino, &model);
        let inode = fs.getattr(file.ino).unwrap();
        assert_eq!(inode.size, 4096);
        assert_eq!(inode.content, Content::Inline(model.clone()));
        assert_eq!(inode.allocated_bytes, 4096);
        assert_eq!(&model[..7], b"help me");
        assert!(model[7..1001].iter().all(|&b| b == 0));
        assert_eq!(fs.read(file.ino, 1001, 5).unwrap(), b"after");
        assert_eq!(fs.read(file.ino, 4090, 100).unwrap(), &model[4090..]);
        assert_eq!(fs.read(file.ino, 4096, 100).unwrap(), b"");
        assert_eq!(fs.read(file.ino, 1 << 40, 100).unwrap(), b"");
        assert_consistent(fs, &[]);
    }

    fn a_file_moves_to_chunks_past_the_inline_threshold(fs) {
        let file = mkfile(fs, ROOT_INO, b"grows");
        let mut model = Vec::new();
        let mut rng = Lcg::new(7);
        write_both(fs, file.ino, &mut model, 0, &rng.bytes(4000));
        assert!(is_inline(&fs.getattr(file.ino).unwrap()));
        write_both(fs, file.ino, &mut model, 4090, &rng.bytes(7));
        let inode = fs.getattr(file.ino).unwrap();
        assert_eq!((inode.size, inode.content.clone()), (4097, Content::Chunked));
        // Bytes 4000..4090 were never written: the hole inside the first chunk is zeros.
        assert_eq!(inode.allocated_bytes, 4097);
        check_against(fs, file.ino, &model);
        assert!(model[4000..4090].iter().all(|&b| b == 0));
        check_layout(&inode);
        assert_consistent(fs, &[]);
    }

    fn chunked_writes_across_chunk_boundaries(fs) {
        let file = mkfile(fs, ROOT_INO, b"big");
        let mut model = Vec::new();
        let mut rng = Lcg::new(11);
        // Straddling one boundary, several, ending exactly on one, starting on one.
        write_both(fs, file.ino, &mut model, CHUNK - 3, &rng.bytes(10));
        write_both(fs, file.ino, &mut model, 12_345, &rng.bytes(3 * CHUNK as usize + 17));
        write_both(fs, file.ino, &mut model, 2 * CHUNK - 100, &rng.bytes(100));
        write_both(fs, file.ino, &mut model, 4 * CHUNK, &rng.bytes(1));
        write_both(fs, file.ino, &mut model, CHUNK + 1, &rng.bytes(CHUNK as usize));
        write_both(fs, file.ino, &mut model, 0, &rng.bytes(1));
        check_against(fs, file.ino, &model);
        // Reads of every shape around the boundaries.
        for offset in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK - 1, 3 * CHUNK + 5, 4 * CHUNK] {
            for size in [1u32, 2, 100, CHUNK as u32, 2 * CHUNK as u32 + 3] {
                let start = (offset as usize).min(model.len());
                let end = (offset as usize + size as usize).min(model.len());
                assert_eq!(fs.read(file.ino, offset, size).unwrap(), &model[start..end], "read({offset}, {size})");
            }
        }
        let inode = fs.getattr(file.ino).unwrap();
        assert_eq!(inode.size, 4 * CHUNK + 1);
        // Chunk 3 holds bytes up to 12_345 + 3 * CHUNK + 17 only; the rest of it is a hole.
        assert_eq!(inode.allocated_bytes, 12_345 + 3 * CHUNK + 17 + 1);
        assert_eq!(total(fs).bytes, inode.allocated_bytes);
        check_layout(&inode);
        assert_consistent(fs, &[]);
    }

    fn random_operations_match_a_vec_model(fs) {
        model_test(fs, 0x5eed, 2000);
    }

    fn appends_in_records_build_each_chunk_from_what_it_holds(fs) {
        // As `tar x` writes a file: records of 10 KiB, one after the other, across chunk
        // boundaries; then a write inside, and appends again.
        let mut rng = Lcg::new(31);
        let file = mkfile(fs, ROOT_INO, b"records");
        let mut model = Vec::new();
        for _ in 0..20 {
            let at = model.len() as u64;
            write_both(fs, file.ino, &mut model, at, &rng.bytes(10_240));
        }
        check_against(fs, file.ino, &model);
        write_both(fs, file.ino, &mut model, 70_000, &rng.bytes(300));
        for len in [1, 1000, 65_536, 7] {
            let at = model.len() as u64;
            write_both(fs, file.ino, &mut model, at, &rng.bytes(len));
        }
        check_against(fs, file.ino, &model);
        let inode = fs.getattr(file.ino).unwrap();
        check_layout(&inode);
        assert_eq!(inode.allocated_bytes, model.len() as u64, "no hole in it");
        assert_eq!(total(fs).bytes, inode.allocated_bytes);
        assert_consistent(fs, &[]);
        fs.sync().unwrap();
        check_against(fs, file.ino, &model);
    }

    fn copies_share_whole_chunks_and_stay_apart_after(fs) {
        // A source with full chunks, a short chunk followed by a hole (zeros up to the
        // next chunk), and a short tail: whole chunks are shared, the rest copied.
        let mut rng = Lcg::new(23);
        let source = mkfile(fs, ROOT_INO, b"source");
        let mut source_model = Vec::new();
        write_both(fs, source.ino, &mut source_model, 0, &rng.bytes(2 * CHUNK as usize));
        write_both(fs, source.ino, &mut source_model, 2 * CHUNK, &rng.bytes(100));
        write_both(fs, source.ino, &mut source_model, 3 * CHUNK, &rng.bytes(CHUNK as usize));
        write_both(fs, source.ino, &mut source_model, 4 * CHUNK, &rng.bytes(777));
        let target = mkfile(fs, ROOT_INO, b"target");
        let mut target_model = Vec::new();
        let (from_ino, to_ino) = (source.ino, target.ino);
        let copy = |fs: &Engine, model: &mut Vec<u8>, bytes: &[u8], from: u64, to: u64, len: u64| {
            let copied = fs.copy_range(from_ino, from, to_ino, to, len).unwrap();
            let available = (bytes.len() as u64).saturating_sub(from).min(len);
            assert_eq!(copied, available, "copy_range({from}, {to}, {len})");
            let end = (to + copied) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[to as usize..end].copy_from_slice(&bytes[from as usize..(from + copied) as usize]);
        };
        // All of it, chunk-aligned on both sides, into an empty file.
        copy(fs, &mut target_model, &source_model, 0, 0, 1 << 20);
        check_against(fs, target.ino, &target_model);
        // Aligned on both sides over bytes the target holds (the chunks are rewritten),
        // and at odd offsets.
        copy(fs, &mut target_model, &source_model, CHUNK, 3 * CHUNK, 2 * CHUNK);
        copy(fs, &mut target_model, &source_model, 5, CHUNK + 7, CHUNK);
        copy(fs, &mut target_model, &source_model, 0, 6 * CHUNK, CHUNK / 2);
        check_against(fs, target.ino, &target_model);
        // Overwriting either side after the copy leaves the other alone.
        write_both(fs, source.ino, &mut source_model, 10, &rng.bytes(5000));
        write_both(fs, target.ino, &mut target_model, 6 * CHUNK + 3, &rng.bytes(20));
        write_both(fs, target.ino, &mut target_model, 2 * CHUNK + 50, &rng.bytes(60_000));
        check_against(fs, source.ino, &source_model);
        check_against(fs, target.ino, &target_model);
        let inode = fs.getattr(target.ino).unwrap();
        check_layout(&inode);
        assert_eq!(
            total(fs).bytes,
            inode.allocated_bytes + fs.getattr(source.ino).unwrap().allocated_bytes
        );
        assert_consistent(fs, &[]);
        fs.sync().unwrap();
        check_against(fs, target.ino, &target_model);
    }

    fn sparse_file_reads_zeros_and_allocates_little(fs) {
        let file = mkfile(fs, ROOT_INO, b"sparse");
        let at = 10 << 20;
        fs.write(file.ino, at, b"tail bytes").unwrap();
        let inode = fs.getattr(file.ino).unwrap();
        assert_eq!(inode.size, at + 10);
        assert_eq!(inode.content, Content::Chunked);
        assert_eq!(inode.allocated_bytes, 10);
        assert_eq!(inode.blocks(), 1);
        assert_eq!(total(fs).bytes, 10);
        for (offset, size) in [(0u64, 4096u32), (CHUNK - 10, 20), (5 << 20, 100_000), (at - 1000, 1000)] {
            let got = fs.read(file.ino, offset, size).unwrap();
            assert_eq!(got.len(), size as usize);
            assert!(got.iter().all(|&b| b == 0), "hole at {offset} is not zeros");
        }
        assert_eq!(fs.read(file.ino, at - 4, 100).unwrap(), b"\0\0\0\0tail bytes");
        // A second island, mid-chunk: the chunk holds bytes from its start.
        fs.write(file.ino, 3 * CHUNK + 100, b"island").unwrap();
        let inode = fs.getattr(file.ino).unwrap();
        assert!(inode.allocated_bytes <= 10 + 106, "allocated {}", inode.allocated_bytes);
        assert_eq!(fs.read(file.ino, 3 * CHUNK + 98, 10).unwrap(), b"\0\0island\0\0");
        assert_eq!(total(fs).bytes, inode.allocated_bytes);
        // A full read equals a model.
        let mut model = vec![0u8; (at + 10) as usize];
        model[at as usize..].copy_from_slice(b"tail bytes");
        model[(3 * CHUNK + 100) as usize..(3 * CHUNK + 106) as usize].copy_from_slice(b"island");
        assert!(read_all(fs, file.ino) == model);
        assert_consistent(fs, &[]);
    }

    fn truncate_shrink_then_grow_reads_zeros(fs) {
        let mut rng = Lcg::new(3);
        // Inline.
        let small = mkfile(fs, ROOT_INO, b"small");
        let mut model = Vec::new();
        write_both(fs, small.ino, &mut model, 0, &rng.bytes(3000));
        truncate_both(fs, small.ino, &mut model, 100);
        truncate_both(fs, small.ino, &mut model, 2000);
        check_against(fs, small.ino, &model);
        assert!(model[100..].iter().all(|&b| b == 0));
        assert_eq!(fs.getattr(small.ino).unwrap().allocated_bytes, 2000);
        // Chunked: shrink into the middle of a chunk, then grow past where data was.
        let big = mkfile(fs, ROOT_INO, b"big");
        let mut model = Vec::new();
        write_both(fs, big.ino, &mut model, 0, &rng.bytes(3 * CHUNK as usize + 500));
        truncate_both(fs, big.ino, &mut model, CHUNK + 10);
        let inode = fs.getattr(big.ino).unwrap();
        assert_eq!(inode.allocated_bytes, CHUNK + 10);
        truncate_both(fs, big.ino, &mut model, 3 * CHUNK);
        check_against(fs, big.ino, &model);
        assert!(model[(CHUNK + 10) as usize..].iter().all(|&b| b == 0));
        assert_eq!(fs.getattr(big.ino).unwrap().allocated_bytes, CHUNK + 10);
        // Shrink exactly onto a chunk boundary, grow, and write past the hole.
        truncate_both(fs, big.ino, &mut model, CHUNK);
        assert_eq!(fs.getattr(big.ino).unwrap().allocated_bytes, CHUNK);
        write_both(fs, big.ino, &mut model, 2 * CHUNK + 7, b"later");
        check_against(fs, big.ino, &model);
        assert_eq!(total(fs).bytes, 2000 + fs.getattr(big.ino).unwrap().allocated_bytes);
        check_layout(&fs.getattr(big.ino).unwrap());
        assert_consistent(fs, &[]);
    }

    fn truncate_to_inline_size_moves_data_back_inline(fs) {
        let mut rng = Lcg::new(99);
        let file = mkfile(fs, ROOT_INO, b"f");
        let mut model = Vec::new();
        write_both(fs, file.ino, &mut model, 0, &rng.bytes(2 * CHUNK as usize + 3));
        assert_eq!(fs.getattr(file.ino).unwrap().content, Content::Chunked);
        truncate_both(fs, file.ino, &mut model, 4097);
        assert_eq!(fs.getattr(file.ino).unwrap().content, Content::Chunked);
        truncate_both(fs, file.ino, &mut model, 4096);
        let inode = fs.getattr(file.ino).unwrap();
        assert_eq!(inode.content, Content::Inline(model.clone()));
        assert_eq!(inode.allocated_bytes, 4096);
        check_against(fs, file.ino, &model);
        truncate_both(fs, file.ino, &mut model, 10);
        assert_eq!(fs.getattr(file.ino).unwrap().content, Content::Inline(model.clone()));
        // A sparse chunked file whose first bytes are a hole comes back as zeros.
        let sparse = mkfile(fs, ROOT_INO, b"sparse");
        let mut sparse_model = Vec::new();
        write_both(fs, sparse.ino, &mut sparse_model, 3000, b"xyz");
        write_both(fs, sparse.ino, &mut sparse_model, 3 * CHUNK, b"far away");
        truncate_both(fs, sparse.ino, &mut sparse_model, 3002);
        let inode = fs.getattr(sparse.ino).unwrap();
        assert_eq!(inode.content, Content::Inline(sparse_model.clone()));
        assert_eq!(&sparse_model[2998..], b"\0\0xy");
        // To zero.
        write_both(fs, sparse.ino, &mut sparse_model, 0, &rng.bytes(100_000));
        truncate_both(fs, sparse.ino, &mut sparse_model, 0);
        let inode = fs.getattr(sparse.ino).unwrap();
        assert_eq!((inode.size, inode.allocated_bytes, inode.content), (0, 0, Content::Inline(vec![])));
        assert_eq!(fs.read(sparse.ino, 0, 10).unwrap(), b"");
        assert_eq!(total(fs).bytes, 10);
        assert_consistent(fs, &[]);
    }

    fn grow_an_inline_file_by_truncate(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", b"abc");
        let inode = truncate(fs, file.ino, 200_000);
        assert_eq!((inode.size, inode.content.clone()), (200_000, Content::Chunked));
        assert_eq!(inode.allocated_bytes, 3);
        assert_eq!(fs.read(file.ino, 0, 5).unwrap(), b"abc\0\0");
        let tail = fs.read(file.ino, 199_990, 100).unwrap();
        assert_eq!(tail, vec![0u8; 10]);
        let inode = truncate(fs, file.ino, 4000);
        assert_eq!(inode.content, Content::Inline({
            let mut v = b"abc".to_vec();
            v.resize(4000, 0);
            v
        }));
        assert_consistent(fs, &[]);
    }

    fn data_operations_on_a_directory_are_is_dir(fs) {
        let dir = mkdir(fs, ROOT_INO, b"d");
        assert_err!(fs.write(dir.ino, 0, b"x"), FsError::IsDir);
        assert_err!(fs.read(dir.ino, 0, 10), FsError::IsDir);
        assert_err!(fs.setattr(dir.ino, &SetAttr { size: Some(0), ..sattr() }), FsError::IsDir);
        assert_err!(fs.setattr(ROOT_INO, &SetAttr { size: Some(10), ..sattr() }), FsError::IsDir);
        let d = fs.getattr(dir.ino).unwrap();
        assert_eq!((d.size, d.allocated_bytes), (0, 0));
        assert_err!(fs.write(424_242, 0, b"x"), FsError::NotFound);
        assert_err!(fs.read(424_242, 0, 1), FsError::NotFound);
        assert_err!(fs.setattr(424_242, &SetAttr { size: Some(0), ..sattr() }), FsError::NotFound);
    }

    fn file_size_limits(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        assert_err!(fs.write(file.ino, MAX_FILE_BYTES - 1, b"xy"), FsError::FileTooBig);
        assert_err!(fs.write(file.ino, u64::MAX, b"x"), FsError::FileTooBig);
        assert_err!(fs.write(file.ino, u64::MAX - 1, b"xyz"), FsError::FileTooBig);
        assert_err!(fs.setattr(file.ino, &SetAttr { size: Some(MAX_FILE_BYTES + 1), ..sattr() }), FsError::FileTooBig);
        assert_eq!(fs.getattr(file.ino).unwrap().size, 0);
        fs.write(file.ino, MAX_FILE_BYTES - 1, b"z").unwrap();
        let inode = fs.getattr(file.ino).unwrap();
        // A chunk stores bytes from its start: the last chunk is allocated in full.
        assert_eq!((inode.size, inode.allocated_bytes), (MAX_FILE_BYTES, CHUNK));
        assert_eq!(fs.read(file.ino, MAX_FILE_BYTES - 3, 10).unwrap(), b"\0\0z");
        assert_eq!(truncate(fs, file.ino, MAX_FILE_BYTES).size, MAX_FILE_BYTES);
        assert_eq!(truncate(fs, file.ino, 5).content, Content::Inline(vec![0; 5]));
        assert_eq!(total(fs).bytes, 5);
        assert_consistent(fs, &[]);
    }

    fn reads_are_clipped_at_end_of_file(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![1u8; 70_000]);
        assert_eq!(fs.read(file.ino, 69_990, 100).unwrap().len(), 10);
        assert_eq!(fs.read(file.ino, 70_000, 100).unwrap().len(), 0);
        assert_eq!(fs.read(file.ino, u64::MAX - 5, 100).unwrap().len(), 0);
        assert_eq!(fs.read(file.ino, 5, u32::MAX).unwrap().len(), 69_995);
        let small = mkfile_with(fs, ROOT_INO, b"s", b"0123456789");
        assert_eq!(fs.read(small.ino, 8, 100).unwrap(), b"89");
        assert_eq!(fs.read(small.ino, 3, 0).unwrap(), b"");
        assert_eq!(fs.read(small.ino, u64::MAX, u32::MAX).unwrap(), b"");
    }

    fn zero_byte_reads_of_a_chunked_file(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![1u8; 70_000]);
        assert_eq!(fs.read(file.ino, CHUNK, 0).unwrap(), b"");
        assert_eq!(fs.read(file.ino, 12, 0).unwrap(), b"");
        // Offset 0, size 0: computes `(end - 1)` with end == 0 in read_chunks.
        assert_eq!(fs.read(file.ino, 0, 0).unwrap(), b"");
    }

    fn an_empty_write_does_not_change_the_file(fs) {
        // pwrite(fd, buf, 0, off) has no effect on a regular file, whatever the offset.
        let small = mkfile_with(fs, ROOT_INO, b"small", b"abc");
        assert_eq!(fs.write(small.ino, 1000, b"").unwrap(), 0);
        let empty = mkfile(fs, ROOT_INO, b"empty");
        assert_eq!(fs.write(empty.ino, 10 << 20, b"").unwrap(), 0);
        let (small, empty) = (fs.getattr(small.ino).unwrap(), fs.getattr(empty.ino).unwrap());
        assert_eq!(
            (small.size, empty.size, is_inline(&empty)),
            (3, 0, true),
            "sizes after empty writes at 1000 (inline file) and at 10 MiB (empty file)"
        );
        assert_eq!(read_all(fs, small.ino), b"abc");
        assert_consistent(fs, &[]);
    }

    fn writes_update_times_and_setattr_sets_them(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        let old = Timestamp { secs: 1_000_000_000, nanos: 5 };
        let set = SetAttr { atime: Some(SetTime::At(old)), mtime: Some(SetTime::At(old)), ..sattr() };
        let inode = fs.setattr(file.ino, &set).unwrap();
        assert_eq!((inode.atime, inode.mtime), (old, old));
        assert!(inode.ctime > old);
        let ctime = Timestamp { secs: 42, nanos: 7 };
        let inode = fs.setattr(file.ino, &SetAttr { ctime: Some(ctime), ..sattr() }).unwrap();
        assert_eq!((inode.ctime, inode.mtime), (ctime, old));
        let before_write = fs.getattr(file.ino).unwrap();
        fs.write(file.ino, 0, b"x").unwrap();
        let after = fs.getattr(file.ino).unwrap();
        assert!(after.mtime > old && after.ctime > ctime);
        assert_eq!(after.atime, before_write.atime);
        fs.setattr(file.ino, &SetAttr { mtime: Some(SetTime::At(old)), ..sattr() }).unwrap();
        let truncated = truncate(fs, file.ino, 0);
        assert!(truncated.mtime > old);
        let negative = Timestamp { secs: -100, nanos: 999_999_999 };
        let inode = fs.setattr(file.ino, &SetAttr { mtime: Some(SetTime::At(negative)), ..sattr() }).unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().mtime, negative);
        assert_eq!(inode.mtime.to_system_time(), Timestamp::from_system_time(negative.to_system_time()).to_system_time());
        let now = fs.setattr(file.ino, &SetAttr { atime: Some(SetTime::Now), ..sattr() }).unwrap();
        assert!(now.atime > old);
    }

    fn chmod_and_chown_rules(fs) {
        let file = fs.create(ROOT_INO, b"f", &NewInode { perm: 0o6755, ..regular() }, ME).unwrap();
        assert_eq!(file.perm, 0o6755);
        let inode = fs.setattr(file.ino, &SetAttr { perm: Some(0o100640), ..sattr() }).unwrap();
        assert_eq!(inode.perm, 0o640, "perm keeps only the 0o7777 bits");
        fs.setattr(file.ino, &SetAttr { perm: Some(0o6755), ..sattr() }).unwrap();
        // chown clears setuid, and setgid since the file is group-executable.
        let inode = fs.setattr(file.ino, &SetAttr { uid: Some(2000), ..sattr() }).unwrap();
        assert_eq!((inode.uid, inode.gid, inode.perm), (2000, 1000, 0o755));
        // Setgid without group-exec (mandatory locking marker) survives a chown.
        fs.setattr(file.ino, &SetAttr { perm: Some(0o6745), ..sattr() }).unwrap();
        let inode = fs.setattr(file.ino, &SetAttr { gid: Some(3000), ..sattr() }).unwrap();
        assert_eq!((inode.gid, inode.perm), (3000, 0o2745));
        // An explicit mode in the same call wins.
        let inode = fs.setattr(file.ino, &SetAttr { uid: Some(1000), perm: Some(0o4755), ..sattr() }).unwrap();
        assert_eq!((inode.uid, inode.perm), (1000, 0o4755));
        // chown to the same owner changes no bits.
        let inode = fs.setattr(file.ino, &SetAttr { uid: Some(1000), gid: Some(3000), ..sattr() }).unwrap();
        assert_eq!(inode.perm, 0o4755);
        // Directories keep their setgid bit on chown.
        let dir = fs.mkdir(ROOT_INO, b"d", 0o2775, ME).unwrap();
        let dir = fs.setattr(dir.ino, &SetAttr { uid: Some(2000), gid: Some(3000), ..sattr() }).unwrap();
        assert_eq!(dir.perm, 0o2775);
        assert_eq!(fs.getattr(dir.ino).unwrap(), dir);
        assert_consistent(fs, &[]);
    }

    fn create_of_a_regular_file_ignores_or_refuses_a_target(fs) {
        // `NewInode::target` is documented as "empty for other kinds"; a non-empty one for a
        // regular file must not leak into the file's bytes.
        let new = NewInode { kind: FileKind::Regular, perm: 0o644, rdev: 0, target: b"garbage" };
        match fs.create(ROOT_INO, b"f", &new, ME) {
            Err(FsError::Invalid(_)) => {}
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(inode) => {
                fs.write(inode.ino, 0, b"x").unwrap();
                let inode = fs.getattr(inode.ino).unwrap();
                assert_eq!(inode.size, 1, "content {:?}", inode.content);
                assert_eq!(read_all(fs, inode.ino), b"x");
                assert_consistent(fs, &[]);
            }
        }
    }
}

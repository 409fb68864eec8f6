//! K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K) against the Python `gguf` package's
//! dequantisation, to the bit: seeded random super-blocks and the f32 values gguf-py gives them
//! (`tests/fixtures/gguf-kquants`, made by `make_fixture.py` there), both as raw blocks and as
//! the tensors of a GGUF file written by `gguf.GGUFWriter`. Wrong lengths, rows that are not
//! whole super-blocks and truncated files are typed errors, never panics.
use std::path::{Path, PathBuf};

use lmrl_models::ModelError;
use lmrl_models::gguf::{GgmlType, GgufFile, dequantize};
use sha2::{Digest, Sha256};

mod common;

use common::gguf_writer::GgufBuilder;

const QK_K: usize = 256;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gguf-kquants")
}

fn read(name: &str) -> Vec<u8> {
    let p = fixture_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn manifest() -> serde_json::Value {
    serde_json::from_slice(&read("manifest.json")).unwrap()
}

/// One type's fixture: its raw super-blocks and the values gguf-py dequantised them to.
struct Case {
    ty: GgmlType,
    name: String,
    blocks: Vec<u8>,
    expected: Vec<f32>,
    tensor: String,
    shape: Vec<usize>,
}

fn cases() -> Vec<Case> {
    let m = manifest();
    m["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let id = t["ggml_type"].as_u64().unwrap() as u32;
            Case {
                ty: GgmlType::from_u32(id),
                name: t["type"].as_str().unwrap().to_string(),
                blocks: read(t["blocks_file"].as_str().unwrap()),
                expected: read(t["expected_file"].as_str().unwrap())
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                tensor: t["tensor"].as_str().unwrap().to_string(),
                shape: t["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap() as usize)
                    .collect(),
            }
        })
        .collect()
}

/// Asserts `got` and `want` are the same f32 bit patterns, naming the first element that is not.
fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: element {i} (super-block {}, offset {}) is {:e} ({:#010x}), gguf-py gives {:e} ({:#010x})",
            i / QK_K,
            i % QK_K,
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

#[test]
fn fixture_files_match_the_manifest() {
    let m = manifest();
    let sums = m["sha256"].as_object().unwrap();
    // Every file the manifest names is pinned, and nothing it pins is missing.
    let mut named = vec![m["gguf_file"].as_str().unwrap().to_string()];
    for t in m["types"].as_array().unwrap() {
        for k in ["blocks_file", "expected_file"] {
            named.push(t[k].as_str().unwrap().to_string());
        }
    }
    named.sort();
    let mut pinned: Vec<String> = sums.keys().cloned().collect();
    pinned.sort();
    assert_eq!(named, pinned);
    for (file, sum) in sums {
        let got: String = Sha256::digest(read(file))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, sum.as_str().unwrap(), "{file}");
    }
}

#[test]
fn fixture_covers_every_k_quant_with_ggml_layouts() {
    let cases = cases();
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]);
    let ids: Vec<u32> = cases.iter().map(|c| c.ty.to_u32()).collect();
    assert_eq!(ids, [10, 11, 12, 13, 14, 15]);
    let bytes = [84, 110, 144, 176, 210, 292];
    let m = manifest();
    for ((c, t), b) in cases.iter().zip(m["types"].as_array().unwrap()).zip(bytes) {
        assert_eq!(c.ty.block_layout(), Some((QK_K, b)), "{}", c.name);
        assert_eq!(t["block_bytes"].as_u64(), Some(b as u64), "{}", c.name);
        assert!(c.ty.name().starts_with(&c.name), "{}", c.ty.name());
        let n = t["blocks"].as_u64().unwrap() as usize;
        assert!(n > 1, "{}: more than one super-block", c.name);
        assert_eq!(c.blocks.len(), n * b, "{}", c.name);
        assert_eq!(c.expected.len(), n * QK_K, "{}", c.name);
        assert!(c.expected.iter().all(|x| x.is_finite()), "{}", c.name);
    }
}

#[test]
fn super_blocks_dequantise_to_gguf_py_bits() {
    for c in cases() {
        let got = dequantize(c.ty, &c.blocks, c.expected.len()).unwrap();
        assert_same_bits(&got, &c.expected, &c.name);
        // Each super-block alone gives its own 256 values.
        let (_, block_bytes) = c.ty.block_layout().unwrap();
        for (i, blk) in c.blocks.chunks_exact(block_bytes).enumerate() {
            let one = dequantize(c.ty, blk, QK_K).unwrap();
            let want = &c.expected[i * QK_K..(i + 1) * QK_K];
            assert_same_bits(&one, want, &format!("{} super-block {i}", c.name));
        }
    }
}

fn check_file_tensors(f: &GgufFile, what: &str) {
    for c in cases() {
        let info = f
            .meta
            .tensor(&c.tensor)
            .unwrap_or_else(|| panic!("{what}: no tensor `{}`", c.tensor));
        assert_eq!(info.ggml_type, c.ty, "{what}: {}", c.tensor);
        let t = f.tensor_f32(info).unwrap();
        assert_eq!(t.shape, c.shape, "{what}: {}", c.tensor);
        assert_same_bits(&t.data, &c.expected, &format!("{what}: {}", c.tensor));
    }
}

#[test]
fn gguf_file_tensors_dequantise_to_gguf_py_bits() {
    let path = fixture_dir().join("kquants.gguf");
    check_file_tensors(&GgufFile::open(&path).unwrap(), "from the file");
    check_file_tensors(
        &GgufFile::parse(&path, read("kquants.gguf")).unwrap(),
        "in memory",
    );
}

#[test]
fn wrong_lengths_are_refused_not_read_past() {
    for c in cases() {
        let (_, bb) = c.ty.block_layout().unwrap();
        let one = &c.blocks[..bb];
        let two = &c.blocks[..2 * bb];
        let name = &c.name;
        // A byte short, a byte over, and a whole block over or short of the element count.
        assert!(dequantize(c.ty, &one[..bb - 1], QK_K).is_none(), "{name}");
        assert!(dequantize(c.ty, &two[..bb + 1], QK_K).is_none(), "{name}");
        assert!(dequantize(c.ty, two, QK_K).is_none(), "{name}");
        assert!(dequantize(c.ty, one, 2 * QK_K).is_none(), "{name}");
        // Element counts that are not whole super-blocks, whatever the bytes.
        for n in [1, 32, 255, 257, QK_K + 128] {
            assert!(dequantize(c.ty, one, n).is_none(), "{name} n={n}");
            assert!(dequantize(c.ty, two, n).is_none(), "{name} n={n}");
        }
        assert!(dequantize(c.ty, &[], 0).unwrap().is_empty(), "{name}");
        assert!(dequantize(c.ty, &[], QK_K).is_none(), "{name}");
    }
}

#[test]
fn any_block_bytes_dequantise_without_panicking() {
    // Every bit pattern is a block, including scales that are NaN or infinite.
    for c in cases() {
        let (_, bb) = c.ty.block_layout().unwrap();
        let mut seed = 0x2545_f491_u32;
        let noise: Vec<u8> = (0..bb)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed as u8
            })
            .collect();
        for blk in [vec![0u8; bb], vec![0xff; bb], vec![0x7c; bb], noise] {
            let w = dequantize(c.ty, &blk, QK_K).unwrap();
            assert_eq!(w.len(), QK_K, "{}", c.name);
        }
        // All-zero blocks are all zeros.
        let zeros = dequantize(c.ty, &vec![0u8; bb], QK_K).unwrap();
        assert!(zeros.iter().all(|&x| x == 0.0), "{}", c.name);
    }
}

fn format_reason<T: std::fmt::Debug>(r: lmrl_models::Result<T>, what: &str) -> String {
    match r {
        Err(ModelError::Format { format, reason, .. }) => {
            assert_eq!(format, "GGUF", "{what}");
            reason
        }
        other => panic!("{what}: expected a Format error, got {other:?}"),
    }
}

#[test]
fn truncated_kquant_file_is_a_format_error() {
    let bytes = read("kquants.gguf");
    let f = GgufFile::parse(Path::new("kquants.gguf"), bytes.clone()).unwrap();
    // Where the last tensor's data ends (the writer pads the file beyond it).
    let end = f
        .meta
        .tensors
        .iter()
        .map(|t| {
            let n: u64 = t.dims.iter().product();
            f.meta.data_offset + t.offset + t.ggml_type.byte_size(n).unwrap()
        })
        .max()
        .unwrap() as usize;
    assert!(end <= bytes.len());
    for cut in 0..end {
        let r = GgufFile::parse(Path::new("cut.gguf"), bytes[..cut].to_vec());
        let reason = format_reason(r.map(|_| ()), &format!("cut at {cut}"));
        // Cuts in the data section name the tensor that no longer fits.
        if cut as u64 >= f.meta.data_offset {
            assert!(
                reason.contains("truncated") && reason.contains(".weight"),
                "cut at {cut}: {reason}"
            );
        }
    }
    for cut in end..=bytes.len() {
        check_file_tensors(
            &GgufFile::parse(Path::new("cut.gguf"), bytes[..cut].to_vec()).unwrap(),
            &format!("cut at {cut}"),
        );
    }
}

#[test]
fn rows_that_are_not_whole_super_blocks_are_format_errors_naming_the_tensor() {
    for c in cases() {
        let id = c.ty.to_u32();
        let (_, bb) = c.ty.block_layout().unwrap();
        // At parse time: 2 rows of 128 elements hold one super-block's worth of bytes.
        let mut b = GgufBuilder::new();
        b.raw_tensor("half.weight", &[2, 128], id, c.blocks[..bb].to_vec());
        let r = GgufFile::parse(Path::new("half.gguf"), b.build());
        let reason = format_reason(r.map(|_| ()), &c.name);
        assert!(
            reason.contains("half.weight") && reason.contains(&c.name) && reason.contains("256"),
            "{reason}"
        );

        // At read time, on dims edited after parsing (the metadata is public): the same 512
        // elements as 4 rows of 128, then a count that is not whole super-blocks at all.
        let mut f = GgufFile::parse(Path::new("kquants.gguf"), read("kquants.gguf")).unwrap();
        let i = f
            .meta
            .tensors
            .iter()
            .position(|t| t.name == c.tensor)
            .unwrap();
        for dims in [vec![128, 4], vec![300]] {
            f.meta.tensors[i].dims = dims.clone();
            let info = f.meta.tensors[i].clone();
            let reason = format_reason(f.tensor_f32(&info), &format!("{} {dims:?}", c.name));
            assert!(
                reason.contains(&c.tensor) && reason.contains("block size 256"),
                "{reason}"
            );
        }
        // More super-blocks than the file holds.
        f.meta.tensors[i].dims = vec![QK_K as u64, 1 << 20];
        let info = f.meta.tensors[i].clone();
        let reason = format_reason(f.tensor_f32(&info), &c.name);
        assert!(
            reason.contains(&c.tensor) && reason.contains("outside the file"),
            "{reason}"
        );
    }
}

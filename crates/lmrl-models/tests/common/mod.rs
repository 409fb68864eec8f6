//! Helpers shared by the integration tests; each test crate uses a different subset.
#![allow(dead_code)]
pub mod gguf_writer;
